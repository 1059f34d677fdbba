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
logged in one line now and then (``connection_log``), and so is a failing ``accept``: never
a traceback per connection. Once a request's headers are whole, a body the app reads through
``receive()`` keeps the pace ``protocol.receive_into`` holds part bodies to (``MIN_RATE``
after ``RATE_GRACE``), or its connection is closed.

Answers have a deadline too. A client that asked for a download and stopped reading it held
its connection, its slot under the cap and whatever the answer held (a file, a task) for
good: the transport paused the app's writes and the answer waited for a drain that never
came. So once writing pauses (``pause_writing``: the client takes nothing), a connection
whose client takes none of its answer for ``ConnectionLimits.send_timeout`` is aborted and
reset, which ends the answer's wait; a client that reads keeps its connection, as slowly as
the kernel lets us see (it reopens the client's window a segment, ~32 KiB on loopback, at a
time, so at least that much a deadline): what it took is counted in the transport's buffer
and the kernel's send queue (``_unsent``), not by ``resume_writing`` alone, which comes only
once the buffer is nearly empty. ``pathsend`` reports its waits on a full socket the same
way. Once the server is stopping, the deadline is at most half its grace
(``_send_timeout``): a client that stopped reading would otherwise hold a restart for the
whole grace, its answer then cancelled with a traceback. ``ConnectionRules`` is the protocol
doing all this; ``protocol.BodyProtocol`` builds on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import logging
import resource
import socket
import struct
import termios
import time
import weakref
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from tracestore.errors import ServiceUnavailable
from tracestore.server.ids import new_request_id
from tracestore.server.serving.connection_log import CONNECTIONS, quiet_accept_errors

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
# A request body must keep up MIN_RATE on average once its first RATE_GRACE seconds are
# past, and end within BODY_DEADLINE (protocol.py holds part bodies to the same).
MIN_RATE = 64 * 1024
RATE_GRACE = 30.0
BODY_DEADLINE = 3600.0
# How often, over ``send_timeout``, a paused answer is looked at for bytes its client took:
# a client that takes none is cut off between 1 and 1 + 1/SEND_CHECKS deadlines after.
SEND_CHECKS = 4


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
    send_timeout: float = 120.0
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


class ConnectionRules(HttpToolsProtocol):
    """uvicorn's httptools protocol holding its connections to ``ConnectionLimits`` (module
    doc), and every request body the app reads through ``receive()`` to a pace."""

    _header_timer: asyncio.TimerHandle | None = None
    _paced: RequestResponseCycle | None = None  # the request whose body is held to a pace
    _paced_bytes = 0
    _paced_since = _paced_checked = 0.0
    _body_timer: asyncio.TimerHandle | None = None
    _send_timer: asyncio.TimerHandle | None = None
    _unsent_seen = 0  # the answer's bytes not yet taken by the client, when last looked at
    _quiet_checks = 0  # looks since the client last took some
    _stopping = False  # the server is shutting down

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._limits = limits_of(config)
        self._waiting = waiting_of(server_state)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        quiet_accept_errors(self.loop)
        if len(self.connections) > self._limits.cap and not self._make_room():
            return
        self._waiting[self] = None
        # Until its first byte; uvicorn cancels it at every read, as its keep-alive.
        self.timeout_keep_alive_task = self.loop.call_later(
            self._limits.idle_timeout, self.timeout_keep_alive_handler
        )

    def _make_room(self) -> bool:
        """Over the cap: close the connection that has waited longest for a request's
        headers (True), or, every one being inside a request, refuse this one (False)."""
        oldest = next(iter(self._waiting), None)
        if oldest is not None:
            oldest.close_waiting()
            CONNECTIONS.note("waiting connections closed at the cap", self._cap_detail())
            return True
        self.connections.discard(self)
        self.transport.write(_refusal())
        self.transport.close()
        CONNECTIONS.note("new connections refused (503) at the cap", self._cap_detail())
        return False

    def _cap_detail(self) -> str:
        return f" (TRACESTORE_MAX_CONNECTIONS {self._limits.cap})"

    def close_waiting(self) -> None:
        """Close this connection, which waits for a request's headers; it no longer counts."""
        self._stop_waiting()
        self.connections.discard(self)
        self.transport.close()

    def _stop_waiting(self) -> None:
        self._waiting.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # A request's first bytes, its headers not yet whole: they have this long.
        if self._header_timer is None and self in self._waiting:
            self._header_timer = self.loop.call_later(
                self._limits.header_timeout, self._headers_too_slow
            )

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self in self._waiting and not self.transport.is_closing():
            self.close_waiting()
            CONNECTIONS.note(
                "closed with their headers incomplete",
                f" (TRACESTORE_HEADER_TIMEOUT {self._limits.header_timeout:g} s)",
            )

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # idle until its next request
            self._waiting[self] = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        self._unpace()
        self._stop_send_deadline()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        super().shutdown()
        self._stopping = True
        if self._send_timer is not None:  # a paused answer: its deadline shortened now
            self._stop_send_deadline()
            self._check_send_in()

    def _send_timeout(self) -> float:
        """The send deadline: ``send_timeout``, and at most half the grace of a shutdown."""
        grace = self.config.timeout_graceful_shutdown
        if self._stopping and grace is not None:
            return min(self._limits.send_timeout, grace / 2)
        return self._limits.send_timeout

    def pause_writing(self) -> None:
        """The client takes nothing for now: its answer waits, for at most ``send_timeout``
        without the client taking a byte (module doc)."""
        super().pause_writing()
        if self._send_timer is None:
            self._unsent_seen, self._quiet_checks = self._unsent(), 0
            self._check_send_in()

    def resume_writing(self) -> None:
        self._stop_send_deadline()
        super().resume_writing()

    def _check_send_in(self) -> None:
        delay = self._send_timeout() / SEND_CHECKS
        self._send_timer = self.loop.call_later(delay, self._check_send)

    def _stop_send_deadline(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _unsent(self) -> int:
        return self.transport.get_write_buffer_size() + _send_queue(self.transport)

    def _check_send(self) -> None:
        self._send_timer = None
        unsent = self._unsent()
        taken = unsent < self._unsent_seen
        self._unsent_seen = unsent
        self._quiet_checks = 0 if taken else self._quiet_checks + 1
        if self._quiet_checks < SEND_CHECKS:
            self._check_send_in()
            return
        # A reset, not a close: the kernel would otherwise keep the unsent answer (and
        # probe the client's closed window) for minutes after the descriptor is gone.
        raw = self.transport.get_extra_info("socket")
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()
        timeout = self._send_timeout()
        if timeout < self._limits.send_timeout:
            detail = f" ({timeout:g} s, half TRACESTORE_SHUTDOWN_GRACE: the server is stopping)"
        else:
            detail = f" (TRACESTORE_SEND_TIMEOUT {timeout:g} s)"
        CONNECTIONS.note("closed with their answers unread", detail)

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope and _declares_body(self.headers):
            self._pace(cycle)

    def on_body(self, body: bytes) -> None:
        if self._paced is self.cycle:
            self._paced_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._paced is self.cycle:
            self._unpace()
        super().on_message_complete()

    # A body the app reads through receive() (JSON bodies, chunked ones) is held to the
    # pace ``receive_into`` holds part bodies to: MIN_RATE on average once RATE_GRACE is
    # past, whole within BODY_DEADLINE. A sender that trickles is cut off (its connection
    # closed, the app's receive() answering a disconnect) rather than held for good.

    def _pace(self, cycle: RequestResponseCycle) -> None:
        self._paced, self._paced_bytes = cycle, 0
        self._paced_since = self._paced_checked = time.monotonic()
        self._check_pace_in(RATE_GRACE)

    def _check_pace_in(self, delay: float) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
        self._body_timer = self.loop.call_later(delay, self._check_pace)

    def _unpace(self) -> None:
        self._paced = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _check_pace(self) -> None:
        self._body_timer = None
        cycle = self._paced
        if cycle is None or not cycle.more_body or cycle.disconnected:
            self._paced = None
            return
        now = time.monotonic()
        if self.flow.read_paused:  # the app, not the sender, holds the body up
            self._paced_since += now - self._paced_checked
        self._paced_checked = now
        since = self._paced_since
        due = min(since + RATE_GRACE + self._paced_bytes / MIN_RATE, since + BODY_DEADLINE)
        if now < due or self.flow.read_paused:
            self._check_pace_in(max(1.0, due - now))
            return
        self._paced = None
        self.transport.close()
        CONNECTIONS.note(
            "closed with their request bodies too slow",
            f" (under {MIN_RATE} bytes/s after {RATE_GRACE:g} s)",
        )


def _refusal() -> bytes:
    """The 503 a connection over the cap gets before it is closed, with the error envelope."""
    envelope = {
        "error": {
            "code": ServiceUnavailable.code,
            "message": "The service holds as many connections as it may "
            "(TRACESTORE_MAX_CONNECTIONS), each inside a request; retry shortly",
            "requestId": new_request_id(),
        }
    }
    body = json.dumps(envelope).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"retry-after: 1\r\nconnection: close\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _send_queue(transport: asyncio.BaseTransport) -> int:
    """Bytes in the kernel's send queue of ``transport``'s socket its client has not yet
    taken (Linux's SIOCOUTQ); 0 where the system does not tell."""
    raw = transport.get_extra_info("socket")
    try:
        answer = fcntl.ioctl(raw.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (AttributeError, OSError, ValueError):  # no socket, closed, or not Linux
        return 0
    return int(struct.unpack("i", answer)[0])


def _declares_body(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(
        name == b"transfer-encoding" or (name == b"content-length" and value != b"0")
        for name, value in headers
    )
