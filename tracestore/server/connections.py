"""The connections ``tracestore serve`` holds open, and what bounds them (issue 41).

uvicorn's keep-alive deadline starts after an answer: a connection that never finished its
headers (idle from its first byte, or a header byte every few seconds) was held for good.
20,800 of them took a process to its open-file limit; from then on the event loop's accept
logged a traceback per try, thousands a second, while well-behaved clients got no answer.

So ``protocol.BodyProtocol`` closes a connection that waits too long for a request (new, or
idle after an answer: ``ConnectionLimits.idle_timeout``) or whose request's headers are not
whole ``header_timeout`` seconds after their first byte; and it keeps the process's
connections under a cap (``max_connections``, by default what the open-file limit allows,
``connection_cap``). A connection over the cap closes the one that has waited longest for a
request's headers (``Waiting``): an idle or trickling connection gives way to a new one, so
attackers who open many cannot shut out a client whose request is whole; only when every
connection is inside a request is the new one refused (503). What is closed or refused is
logged in one line now and then (``Occasional``), and so is a failing ``accept``
(``quiet_accept_errors``): never a traceback per connection.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
import time
import weakref
from dataclasses import dataclass
from typing import Any

import uvicorn

log = logging.getLogger("tracestore")

# Descriptors a connection may hold at once: its socket, the socket's duplicate while a part
# body is received (protocol.py) and the file it writes or sends; and those kept for the
# rest of the process (the database, logs, the listening socket's accept bursts: ``BACKLOG``).
DESCRIPTORS_PER_CONNECTION = 3
RESERVED_DESCRIPTORS = 256
# Connections accepted per wake of the listening socket (asyncio accepts up to the listen
# backlog in one go, each a descriptor before the cap sees it): within the reserve, and at
# most a quarter of the cap, so that a connection's request is read before a flood of new
# ones has made it the longest waiting (``backlog``).
BACKLOG = 128
# The soft open-file limit ``serve`` raises itself to when the hard one is unlimited.
MAX_OPEN_FILES = 1 << 20
LOG_EVERY = 10.0


def connection_cap(open_files: int) -> int:
    """The connections a process allowed ``open_files`` descriptors may hold."""
    return max(8, (open_files - RESERVED_DESCRIPTORS) // DESCRIPTORS_PER_CONNECTION)


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard one (as Go's runtime does), and
    answer it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return MAX_OPEN_FILES if soft == resource.RLIM_INFINITY else soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):  # refused (a container's policy): keep the soft limit
        return soft
    return wanted


@functools.cache
def _this_process_cap() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return connection_cap(MAX_OPEN_FILES if soft == resource.RLIM_INFINITY else soft)


@dataclass(frozen=True)
class ConnectionLimits:
    """The deadlines and the cap of ``BodyProtocol``'s connections (module doc)."""

    header_timeout: float = 20.0
    idle_timeout: float = 75.0
    max_connections: int | None = None  # None: ``connection_cap`` of the open-file limit

    @property
    def cap(self) -> int:
        return self.max_connections or _this_process_cap()


DEFAULT_LIMITS = ConnectionLimits()


class ServeConfig(uvicorn.Config):
    """uvicorn's configuration, carrying the ``ConnectionLimits`` that ``BodyProtocol``
    enforces (pickled with it into the processes of ``serve --workers N``)."""

    def __init__(self, app: Any, *, connections: ConnectionLimits, **options: Any) -> None:
        # uvicorn's keep-alive, armed after each answer, is the idle deadline (whole seconds).
        idle = max(1, round(connections.idle_timeout))
        backlog = max(8, min(BACKLOG, connections.cap // 4))
        super().__init__(app, backlog=backlog, timeout_keep_alive=idle, **options)
        self.connections = connections


def limits_of(config: uvicorn.Config) -> ConnectionLimits:
    limits = getattr(config, "connections", None)
    return limits if isinstance(limits, ConnectionLimits) else DEFAULT_LIMITS


# Per server: its connections waiting for a request's headers, the longest waiting first.
_WAITING: weakref.WeakKeyDictionary[Any, dict[Any, None]] = weakref.WeakKeyDictionary()


def waiting_of(server_state: Any) -> dict[Any, None]:
    """``server_state``'s connections that wait for a request's headers (new, reading them,
    or idle after an answer), in the order they began waiting: a dict used as an ordered
    set (insertion, removal and the oldest in constant time)."""
    waiting = _WAITING.get(server_state)
    if waiting is None:
        waiting = _WAITING[server_state] = {}
    return waiting


class Occasional:
    """Counts of what happened to connections, logged in one line at most every
    ``LOG_EVERY`` seconds (the line says how many since the last)."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._counts: dict[str, int] = {}
        self._logged = 0.0

    def note(self, event: str, detail: str = "") -> None:
        self._counts[event] = self._counts.get(event, 0) + 1
        now = time.monotonic()
        if now - self._logged < LOG_EVERY:
            return
        self._logged = now
        counts = ", ".join(f"{n} {e}" for e, n in self._counts.items())
        self._counts = {}
        log.warning("%s: %s in the last %.0f s%s", self._what, counts, LOG_EVERY, detail)


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
