"""What happens to a served process's connections, said in one line now and then: closed at
the cap or by a deadline, refused, failing accepts (``connections.py``). Never a traceback
or a line per connection: an attack makes thousands a second."""

from __future__ import annotations

import asyncio
import logging
import resource
import time
import weakref
from typing import Any

log = logging.getLogger("tracestore")

LOG_EVERY = 10.0


class Occasional:
    """Counts of what happened to connections, logged in one line at most every
    ``LOG_EVERY`` seconds (the line says how many since the last). What is counted inside a
    window is said at its end (a timer on the running loop), and what is left at exit by
    ``flush`` (the app's lifespan), not only when a later event comes."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._counts: dict[str, int] = {}
        self._detail = ""
        self._logged = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def note(self, event: str, detail: str = "") -> None:
        self._counts[event] = self._counts.get(event, 0) + 1
        self._detail = detail
        waited = time.monotonic() - self._logged
        if waited >= LOG_EVERY:
            self.flush()
            return
        live = self._timer_loop is not None and not self._timer_loop.is_closed()
        if self._timer is not None and live:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop here: the next event, or flush, says it
            return
        self._timer, self._timer_loop = loop.call_later(LOG_EVERY - waited, self.flush), loop

    def flush(self) -> None:
        """Log what was counted and not yet said, if anything."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._counts:
            return
        self._logged = time.monotonic()
        counts = ", ".join(f"{n} {e}" for e, n in self._counts.items())
        self._counts = {}
        log.warning("%s: %s in the last %.0f s%s", self._what, counts, LOG_EVERY, self._detail)


CONNECTIONS = Occasional("connections")
_ACCEPT_FAILED = "socket.accept() out of system resource"  # asyncio's own words
_QUIET_LOOPS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop``'s failing accepts (out of descriptors or memory) cost one line now and
    then instead of a traceback per try: asyncio retries every accept of its burst and logs
    each (1.1 GB of log in 5 minutes of one attack). Other errors go where they went."""
    if loop in _QUIET_LOOPS:
        return
    _QUIET_LOOPS.add(loop)
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if context.get("message") == _ACCEPT_FAILED and isinstance(error, OSError):
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            CONNECTIONS.note(
                "accepts failed",
                f" (last: {error.strerror}; open-file limit {soft}; asyncio retries in 1 s)",
            )
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
