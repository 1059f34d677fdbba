"""Leases: a row that one worker holds until a time (``lease_owner``, ``lease_until``), so
that exactly one does the row's work and another takes it over when the first dies. An
upload session being completed (``completion.py``) and a running job (``jobs.py``) are
both held so.

Taking, renewing and ending a lease are one conditional update each: the row changes only
if the condition still holds when the database applies it, so two workers can never both
believe they hold it. ``take`` sets the owner where the row is free to take; ``renew``
extends it where the owner still holds it (``held``); ``Renewal`` renews at most every
so often, for work that offers a heartbeat more often than that."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, update
from sqlalchemy.orm import Session

from tracestore.server.db.database import Database


def held(model: Any, row_id: str, owner: str, *also: ColumnElement[bool]) -> ColumnElement[bool]:
    """The condition that ``owner`` holds the lease of ``model``'s row ``row_id`` (and
    ``also``: the state its holder keeps it in)."""
    return and_(model.id == row_id, model.lease_owner == owner, *also)


def take(
    session: Session,
    model: Any,
    row_id: str,
    free: ColumnElement[bool],
    owner: str,
    until: datetime,
    **values: Any,
) -> bool:
    """Give ``owner`` the lease of ``model``'s row ``row_id`` until ``until`` (and set
    ``values``) if the row is ``free`` to take now; whether it was, in the caller's
    transaction."""
    return _update(
        session,
        model,
        and_(model.id == row_id, free),
        {"lease_owner": owner, "lease_until": until, **values},
    )


def renew(
    database: Database,
    model: Any,
    condition: ColumnElement[bool],
    until: datetime,
    **values: Any,
) -> bool:
    """Extend a lease to ``until`` (and set ``values``) where ``condition`` (``held``) still
    holds, in a transaction of its own; False when the lease was lost."""
    with database.session() as session:
        return _update(session, model, condition, {"lease_until": until, **values})


def _update(session: Session, model: Any, condition: ColumnElement[bool], values: Any) -> bool:
    result = session.execute(
        update(model).where(condition).values(**values).execution_options(synchronize_session=False)
    )
    return int(result.rowcount) == 1  # type: ignore[attr-defined]


class Renewal:
    """``renew`` of one lease for work that offers a heartbeat (each file sealed, each
    chunk hashed): at most every ``every``, not at each beat; what the renewal finds is
    left to the work's end, which is conditional on the lease too."""

    def __init__(
        self,
        database: Database,
        model: Any,
        condition: ColumnElement[bool],
        lease: timedelta,
        now: Callable[[], datetime],
        every: timedelta,
    ) -> None:
        self._database, self._model, self._condition = database, model, condition
        self._lease, self._now = lease, now
        self._every = every.total_seconds()
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def beat(self) -> None:
        with self._lock:
            if time.monotonic() - self._last < self._every:
                return
            self._last = time.monotonic()
        renew(self._database, self._model, self._condition, self._now() + self._lease)
