"""The HTTP protocol ``tracestore serve`` runs: uvicorn's httptools protocol plus one ASGI
extension, ``tracestore.receive_into``, that hands a request body to a worker thread
straight from the socket.

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
and the app reads ``receive()`` as usual. It leans on uvicorn's protocol internals
(``cycle``, ``flow``, ``parser``), which is why uvicorn's version is bounded in
``pyproject.toml`` and tests/test_protocol.py drives it through a real ``tracestore serve``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio.to_thread
import httptools
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

RECEIVE_INTO = "tracestore.receive_into"
# What ``tracestore serve`` passes to uvicorn as ``http=`` (a string, so workers load it).
HTTP_PROTOCOL = "tracestore.server.protocol:BodyProtocol"
CHUNK = 1024 * 1024
# A body that makes no progress for this long is given up (and its connection closed).
IDLE_TIMEOUT = 300.0

Sink = Callable[[memoryview], None]
ReceiveInto = Callable[[Sink], Awaitable[None]]


def receive_into(scope: dict[str, Any] | Any) -> ReceiveInto | None:
    """The extension for this request, if its server offers it: ``await into(sink)`` calls
    ``sink`` (in a worker thread) with each slice of the body, in order, until the body
    ends; a slice is only valid during its call."""
    extension = scope.get("extensions", {}).get(RECEIVE_INTO)
    return extension if callable(extension) else None


class BodyProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, offering ``tracestore.receive_into`` (module doc)."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope or self.scheme != "http":
            return
        length = _content_length(self.headers)
        if length is None:
            return
        extensions = cast(dict[str, Any], self.scope.setdefault("extensions", {}))
        extensions[RECEIVE_INTO] = functools.partial(self._receive_into, cycle, length)

    async def _receive_into(self, cycle: RequestResponseCycle, length: int, sink: Sink) -> None:
        if cycle.disconnected:
            raise ClientDisconnect()
        # What httptools has parsed already (the body's first bytes came with the headers).
        early = bytes(cycle.body)
        cycle.body = bytearray()
        if not cycle.more_body:
            # All of it is here (and the parser may have moved on to a pipelined request).
            if early:
                await anyio.to_thread.run_sync(sink, memoryview(early))
            return
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
                sock.settimeout(IDLE_TIMEOUT)
                await anyio.to_thread.run_sync(_pump, sock, early, length - len(early), sink)
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


def _new_parser(protocol: HttpToolsProtocol) -> httptools.HttpRequestParser:
    parser = httptools.HttpRequestParser(protocol)
    with contextlib.suppress(AttributeError):  # httptools < 0.6.3 has no leniencies
        parser.set_dangerous_leniencies(lenient_data_after_close=True)
    return parser


def _pump(sock: socket.socket, early: bytes, remaining: int, sink: Sink) -> None:
    if early:
        sink(memoryview(early))
    buffer = memoryview(bytearray(min(CHUNK, max(remaining, 1))))
    while remaining > 0:
        want = min(len(buffer), remaining)
        filled = 0
        while filled < want:
            try:
                n = sock.recv_into(buffer[filled:want])
            except TimeoutError:
                raise ClientDisconnect() from None
            if n == 0:
                raise ClientDisconnect()
            filled += n
        sink(buffer[:filled])
        remaining -= filled


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
