"""The HTTP protocol ``tracestore serve`` runs: uvicorn's httptools protocol plus two ASGI
extensions: ``tracestore.receive_into``, that hands a request body to a worker thread
straight from the socket, and the standard ``http.response.pathsend``, that sends a
response body from a file by ``sendfile`` (tracestore/server/serving/pathsend.py).

Through plain ASGI a part body reaches the app in 64 KiB–256 KiB messages, each copied
three times on the way (httptools' slice, uvicorn's ``bytearray +=`` and ``bytes()``) and
each costing the event loop a pause and a resume of reading; for a 2 GiB upload that is
more CPU than hashing it. With the extension, the route that receives a part asks for its
body once: reading from the connection pauses, one worker thread ``recv_into``s a reused
buffer and hands each filled slice to the route's sink (which hashes and writes it), then
the connection goes back to uvicorn, ready for its next request.

The extension is offered for a request with a ``Content-Length`` and no transfer coding,
on a plain-TCP connection, when the request is the connection's current one; everywhere
else (TLS, chunked bodies, the in-process test client, other servers) the scope lacks it
and the app reads ``receive()`` as usual. Bodies are received on threads of their own (not
the app's thread pool), and a cancelled request (shutdown) returns only once its body's
thread has stopped. It leans on uvicorn's protocol internals (``cycle``, ``flow``,
``parser``), which is why uvicorn's version is bounded in ``pyproject.toml``;
tests/test_protocol.py drives it through a real uvicorn and raw sockets, and
tests/test_e2e_serve.py through ``tracestore serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar, cast, overload

import httptools
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from tracestore.server.serving import connections
from tracestore.server.serving.connections import ConnectionRules
from tracestore.server.serving.pathsend import offer_pathsend

RECEIVE_INTO = "tracestore.receive_into"
# What ``tracestore serve`` passes to uvicorn as ``http=`` (a string, so workers load it).
HTTP_PROTOCOL = "tracestore.server.serving.body_protocol:BodyProtocol"
CHUNK = 1024 * 1024
# A body must keep up MIN_RATE on average once its first RATE_GRACE seconds are past, and
# end within BODY_DEADLINE (connections.py: every body is held to them): a sender that
# trickles or stalls is cut off (its connection closed) whatever each recv does.
MIN_RATE = connections.MIN_RATE
RATE_GRACE = connections.RATE_GRACE
BODY_DEADLINE = connections.BODY_DEADLINE
# A body that gets fewer than FAST_BYTES in PARK_AFTER (none at all, or a trickle) gives
# its thread back; the event loop gathers its bytes (waking for it at most every
# PARK_AFTER) until FAST_BYTES have come (or all of them), then a thread takes over again.
# Idle and trickling senders hold no thread, however many there are, and each holds at
# most FAST_BYTES of the service's memory.
PARK_AFTER = 0.1
FAST_BYTES = 64 * 1024

Sink = Callable[[memoryview], None]
T = TypeVar("T")


def receive_into(scope: dict[str, Any] | Any) -> ReceiveInto | None:
    """The extension for this request, if its server offers it (``ReceiveInto``)."""
    extension = scope.get("extensions", {}).get(RECEIVE_INTO)
    return extension if isinstance(extension, ReceiveInto) else None


# Bodies are received on threads of their own, so that they never starve the threads that
# run the app's endpoints. A body holds a thread only while its bytes flow fast (it parks
# when they stop or slow down); bodies beyond this many wait, their bytes in the kernel's
# socket buffers. Per process: ``serve --workers N`` has N pools. (The executor starts its
# threads only as bodies come.)
BODY_THREADS = 64
_PUMPS = ThreadPoolExecutor(BODY_THREADS, thread_name_prefix="tracestore-body")


class BodyProtocol(ConnectionRules):
    """uvicorn's httptools protocol, offering ``tracestore.receive_into`` (module doc), its
    connections held to the deadlines and the cap of ``connections.ConnectionRules``."""

    _counted: RequestResponseCycle | None = None
    _seen = 0

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope or self.scheme != "http":
            return
        offer_pathsend(cycle, self.loop, self)
        # Body bytes parsed for this request, to tell whether the app took some already.
        self._counted, self._seen = cycle, 0
        length = _content_length(self.headers)
        if length is None:
            return
        extensions = cast(dict[str, Any], self.scope.setdefault("extensions", {}))
        extensions[RECEIVE_INTO] = ReceiveInto(self, cycle, length)

    def on_body(self, body: bytes) -> None:
        if self._counted is self.cycle:
            self._seen += len(body)
        super().on_body(body)

    async def receive_into(
        self, cycle: RequestResponseCycle, length: int, sink: Sink, finish: Callable[[], T]
    ) -> T:
        """The extension's work for ``cycle``'s body of ``length`` bytes (module doc)."""
        if cycle.disconnected:
            raise ClientDisconnect()
        if self._paced is cycle:  # the pump holds the body to its pace itself
            self._unpace()
        if self._counted is cycle and self._seen != len(cycle.body):
            raise RuntimeError("Part of the request body was received already")
        # What httptools has parsed already (the body's first bytes came with the headers).
        early = bytes(cycle.body)
        cycle.body = bytearray()
        if not cycle.more_body:
            # All of it is here (and the parser may have moved on to a pipelined request).
            return (await _run_pump(None, early, 0, sink, finish)).outcome()
        # A body still arriving belongs to the connection's current request.
        if cycle is not self.cycle or cycle.response_started or self.transport.is_closing():
            raise RuntimeError("The request body can no longer be received directly")
        self.flow.pause_reading()
        if cycle.waiting_for_100_continue:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            cycle.waiting_for_100_continue = False
        raw = self.transport.get_extra_info("socket")
        try:
            # A socket of our own on the same connection: the transport may close its file
            # descriptor (shutdown) while the thread still reads.
            with socket.socket(fileno=os.dup(raw.fileno())) as sock:
                body = await _run_pump(sock, early, length - len(early), sink, finish)
        except BaseException:
            # Some of the body may still be on the wire: this connection serves no more.
            cycle.keep_alive = False
            raise
        # The body is consumed, but the parser still expects it: the connection's next
        # request starts with a fresh parser.
        self.parser = _new_parser(self)
        cycle.more_body = False
        cycle.message_event.set()
        self.flow.resume_reading()
        return body.outcome()


class ReceiveInto:
    """The extension as the app sees it: ``await into(sink)`` calls ``sink`` (in a worker
    thread) with each slice of the body, in order, until the body ends; a slice is only
    valid during its call. ``await into(sink, finish)`` then calls ``finish()`` on the same
    thread and answers what it returns (or raises what it raised), which saves the route a
    thread hop of its own. Weak references: a request's scope must not keep its connection
    alive."""

    def __init__(self, protocol: BodyProtocol, cycle: RequestResponseCycle, length: int) -> None:
        self._protocol = weakref.ref(protocol)
        self._cycle = weakref.ref(cycle)
        self._length = length

    @overload
    async def __call__(self, sink: Sink) -> None: ...

    @overload
    async def __call__(self, sink: Sink, finish: Callable[[], T]) -> T: ...

    async def __call__(self, sink: Sink, finish: Callable[[], Any] = lambda: None) -> Any:
        protocol, cycle = self._protocol(), self._cycle()
        if protocol is None or cycle is None:
            raise ClientDisconnect()
        return await protocol.receive_into(cycle, self._length, sink, finish)


async def _run_pump(
    sock: socket.socket | None,
    early: bytes,
    remaining: int,
    sink: Sink,
    finish: Callable[[], T],
) -> _Body[T]:
    """Receive a body: ``early`` and then ``remaining`` bytes from ``sock`` into ``sink``, on
    body threads while bytes flow fast and on the event loop (no thread) while they do not,
    then ``finish()`` on the last body thread (its outcome kept in the answer). Raises
    ClientDisconnect when the sender goes, stalls or falls behind ``MIN_RATE``."""
    body = _Body(sock, early, remaining, sink, finish)
    while not await _on_body_thread(body.pump, sock):
        await body.gather()
    return body


async def _on_body_thread(pump: Callable[[], bool], sock: socket.socket | None) -> bool:
    """Run ``pump`` on a body thread. Cancelled, it returns only once the thread has
    stopped (its socket shut down so that a pending read ends at once): whoever cleans up
    behind the sink (closing the file it writes to) must find no slice being handed over."""
    running = asyncio.get_running_loop().run_in_executor(_PUMPS, pump)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        while not running.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({running})  # never cancels the pump, never raises its error
        if not running.cancelled():
            running.exception()  # retrieved: the cancellation, not the pump's end, is the news
        raise


async def _readable(sock: socket.socket, timeout: float) -> None:
    """Wait on the event loop until ``sock`` has bytes (or its end) to read; ClientDisconnect
    when none come within ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    fd = sock.fileno()
    loop.add_reader(fd, wake)
    try:
        await asyncio.wait_for(ready, max(0.0, timeout))
    except TimeoutError:
        raise ClientDisconnect() from None
    finally:
        loop.remove_reader(fd)


def _new_parser(protocol: HttpToolsProtocol) -> httptools.HttpRequestParser:
    parser = httptools.HttpRequestParser(protocol)
    with contextlib.suppress(AttributeError):  # httptools < 0.6.3 has no leniencies
        parser.set_dangerous_leniencies(lenient_data_after_close=True)
    return parser


class _Body(Generic[T]):
    """A body being received: what is left of it, the bytes received but not yet handed to
    the sink, and how long it may still take. ``pump`` runs on one body thread at a time,
    ``gather`` on the event loop, never both at once. Once the body is whole, ``pump``
    calls ``finish``; ``outcome`` answers what it returned or raises what it raised (after
    the connection is ready for its next request: the whole body was read)."""

    def __init__(
        self,
        sock: socket.socket | None,
        early: bytes,
        remaining: int,
        sink: Sink,
        finish: Callable[[], T],
    ) -> None:
        self._sock = sock
        self._early = early  # came with the headers
        self._pending = bytearray()  # gathered, not yet handed to the sink
        self._remaining = remaining if sock is not None else 0  # not yet handed to the sink
        self._sink = sink
        self._received = 0
        self._started = time.monotonic()
        self._finish = finish
        self._result: T | None = None
        self._error: Exception | None = None

    def outcome(self) -> T:
        if self._error is not None:
            raise self._error
        return cast(T, self._result)

    def _finished(self) -> bool:
        try:
            self._result = self._finish()
        except Exception as exc:
            self._error = exc
        return True

    def time_left(self) -> float:
        """Seconds until the body falls behind ``MIN_RATE`` or passes ``BODY_DEADLINE``."""
        behind = self._started + RATE_GRACE + self._received / MIN_RATE
        return min(behind, self._started + BODY_DEADLINE) - time.monotonic()

    def pump(self) -> bool:
        """On a body thread: hand the sink what arrives until the body is whole (True), or
        until fewer than ``FAST_BYTES`` come in ``PARK_AFTER`` (False: ``gather``, then call
        again)."""
        if self._early:
            early, self._early = self._early, b""
            self._sink(memoryview(early))
        if self._pending:
            pending, self._pending = self._pending, bytearray()
            self._remaining -= len(pending)
            self._sink(memoryview(pending))
        sock = self._sock
        if sock is None or self._remaining <= 0:
            return self._finished()
        buffer = _thread_buffer()
        filled = 0
        window_start, window_bytes = time.monotonic(), 0
        while self._remaining > 0:
            left = self.time_left()
            if left <= 0:
                raise ClientDisconnect()  # too slow
            want = min(len(buffer), self._remaining)
            timeout = min(PARK_AFTER, left)
            if sock.gettimeout() != timeout:  # each change is a system call
                sock.settimeout(timeout)
            try:
                n = sock.recv_into(buffer[filled:want])
            except TimeoutError:
                n = 0
            except ConnectionError:  # reset
                raise ClientDisconnect() from None
            else:
                if n == 0:
                    raise ClientDisconnect()
            filled += n
            self._received += n
            window_bytes += n
            if filled == want:
                self._sink(buffer[:want])
                self._remaining -= want
                filled = 0
            now = time.monotonic()
            if self._remaining > 0 and (n == 0 or now - window_start >= PARK_AFTER):
                if window_bytes < FAST_BYTES:
                    # Idle or trickling: what came goes to the sink, the thread goes back.
                    if filled:
                        self._sink(buffer[:filled])
                        self._remaining -= filled
                    return False
                window_start, window_bytes = now, 0
        return self._finished()

    async def gather(self) -> None:
        """On the event loop: take the bytes that come, without a thread, until
        ``FAST_BYTES`` have come or the body is all here. ClientDisconnect as ``pump``."""
        sock = cast(socket.socket, self._sock)
        want = min(FAST_BYTES, self._remaining)
        while len(self._pending) < want:
            await _readable(sock, self.time_left())
            if sock.gettimeout() != 0.0:
                sock.setblocking(False)
            try:
                data = sock.recv(want - len(self._pending))
            except BlockingIOError:
                continue
            except ConnectionError:
                raise ClientDisconnect() from None
            if not data:
                raise ClientDisconnect()
            self._pending += data
            self._received += len(data)
            if len(self._pending) < want:
                await asyncio.sleep(PARK_AFTER)  # let a trickle gather in the kernel


_BUFFERS = threading.local()


def _thread_buffer() -> memoryview:
    """This body thread's receive buffer of ``CHUNK`` bytes, made once: a fresh 1 MiB per
    body cost a part of 1 MiB its allocation and page faults again."""
    buffer: memoryview | None = getattr(_BUFFERS, "buffer", None)
    if buffer is None:
        buffer = _BUFFERS.buffer = memoryview(bytearray(CHUNK))
    return buffer


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    length: int | None = None
    for name, value in headers:
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
    return length
