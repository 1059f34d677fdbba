"""A clock the tests move by hand: conftest's ``clock`` fixture, given to the services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """A clock the tests move by hand (time travel without sleeping)."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)
