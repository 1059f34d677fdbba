"""Waiting for a server to notice something: poll for the condition, never sleep a guess."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | Literal[False] | None],
    what: str | Callable[[], str],
    timeout: float = 30,
    every: float = 0.05,
) -> T:
    """Call ``condition`` every ``every`` seconds until it returns something true, and return
    that; after ``timeout`` seconds fail with ``what`` (a callable is asked only then, e.g.
    for a server's log). ``condition`` may itself assert what must hold meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what() if callable(what) else what} (waited {timeout} s)")
        time.sleep(every)
