"""The ASGI ``http.response.pathsend`` extension on ``tracestore serve``'s protocol: a
response body sent from a file by the kernel (``sendfile``), never through Python.

Starlette's ``FileResponse`` sends ``{"type": "http.response.pathsend", "path": ...}``
instead of the file's bytes in ``http.response.body`` messages when the scope offers the
extension, for a whole file (a ranged answer is read and sent in chunks as before). Read
and sent in chunks, a blob cost the server a copy out of the page cache into Python and
another into the socket, plus a thread hop per chunk: most of a download's server CPU,
taken from the client on a small machine. By ``sendfile(2)`` the file goes from the page
cache to the socket directly, ``SLICE`` bytes a call at most (a call holds the event loop
while it copies). The calls are ours, not ``loop.sendfile``'s, so that the connection's send
deadline (``connections.py``) sees a client that stops reading: a wait on a full socket is
reported to the protocol as its transport reports its own (``pause_writing``, then
``resume_writing``), and ends when the deadline aborts the connection. Inside
``loop.sendfile`` it waited for good.

The extension is offered on plain-TCP connections only (``BodyProtocol`` decides; through
TLS the kernel cannot send a file) and on asyncio's own event loop. The response must
carry a ``Content-Length`` no larger than the file; the connection is closed when the file
does not fill it (it changed on disk) or the client goes away mid-file: a response that
cannot be finished must not pass for a whole one. Like ``protocol.py`` this leans on
uvicorn's ``RequestResponseCycle`` internals (``response_started``, ``disconnected``,
``expected_content_length``, ``on_response``), which is why uvicorn's version is bounded;
tests/test_pathsend.py drives it through a real uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from asyncio.selector_events import BaseSelectorEventLoop
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO, cast

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

PATHSEND = "http.response.pathsend"
# The most one sendfile(2) may send. asyncio asks the kernel for all that is left of the
# count at each call, and the call copies as long as the socket takes bytes: over loopback
# (a proxy on the host, a local client) that was 4-13 MiB a call, the event loop stopped
# for milliseconds each time, and /healthz took 20-100 ms with 4 downloads running (2 ms
# with the chunked path, which writes 1 MiB at a time).
SLICE = 1024 * 1024
# At most this many reads of 64 KiB discard what came in before a connection is closed.
DISCARD_READS = 64

Send = Callable[[Any], Awaitable[None]]
log = logging.getLogger("tracestore")


def offer_pathsend(
    cycle: RequestResponseCycle, loop: asyncio.AbstractEventLoop, writing: asyncio.BaseProtocol
) -> None:
    """Offer the extension to ``cycle``'s request and answer its pathsend message, if
    ``loop`` is asyncio's selector loop (which ``tracestore serve`` runs) on a system with
    ``sendfile``; ``writing`` (the connection's protocol) is told when the socket takes no
    more and when it takes bytes again. Call before the cycle's app task first runs (it
    looks ``cycle.send`` up then). Not for a request with a body (a GET may have one): the
    app never reads it when the file goes out by sendfile, and a connection closed after
    the answer (``Connection: close``, HTTP/1.0) with the body's rest unread in the kernel
    is reset, the answer's last megabytes still in the socket's send buffer lost with it.
    Sent in chunks, Starlette's ``FileResponse`` reads the body as it sends (it waits on
    ``receive()`` for the client's disconnect)."""
    if not isinstance(loop, BaseSelectorEventLoop) or not hasattr(os, "sendfile"):
        return
    if _has_body(cycle.scope["headers"]):
        return
    extensions = cast(dict[str, Any], cycle.scope.setdefault("extensions", {}))
    extensions[PATHSEND] = {}
    ordinary: Send = cycle.send

    async def send(message: Any) -> None:
        if message.get("type") == PATHSEND:
            await _send_path(cycle, writing, str(message["path"]))
        else:
            await ordinary(message)

    # An instance attribute shadows the method: run_asgi hands the app ``self.send``.
    cycle.send = send  # type: ignore[method-assign]


def _has_body(headers: Any) -> bool:
    return any(
        name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0")
        for name, value in headers
    )


async def _send_path(cycle: RequestResponseCycle, writing: asyncio.BaseProtocol, path: str) -> None:
    if cycle.disconnected:  # (uvicorn drops every message then, the response's start too)
        return
    if not cycle.response_started or cycle.response_complete:
        raise RuntimeError(f"Unexpected ASGI message '{PATHSEND}' outside a response's body")
    if cycle.chunked_encoding or cycle.scope["method"] == "HEAD":
        raise RuntimeError(f"ASGI '{PATHSEND}' needs a Content-Length and a GET")
    transport = cycle.transport
    expected = cycle.expected_content_length
    sent = 0
    try:
        # Opening a local file: no wait worth a thread hop.
        with open(path, "rb") as file:
            if os.fstat(file.fileno()).st_size < expected:
                log.warning("%s is shorter than the %d bytes its answer declared", path, expected)
            else:
                sent = await _send_slices(cycle, writing, file, expected)
    except OSError as exc:  # the client went away mid-file, or the file did
        log.info("a file's answer ended early: %s", exc)
    if sent != expected:
        # The body cannot be finished (or the send deadline cut the connection): the client
        # must not take what came as the whole.
        # (Marked gone, so that uvicorn does not log the unfinished response as an error.)
        cycle.keep_alive = False
        cycle.disconnected = True
        transport.close()
        return
    cycle.expected_content_length = 0
    cycle.response_complete = True
    cycle.message_event.set()
    if not cycle.keep_alive:
        _discard_received(transport)
        transport.close()
    cycle.on_response()


def _discard_received(transport: asyncio.Transport) -> None:
    """Read and drop what the client sent while the file went out (reading pauses during
    ``loop.sendfile``: a request pipelined behind this one, not yet parsed). A socket
    closed with bytes unread is reset, and a reset drops what its send buffer still holds:
    the file's last megabytes (a shutdown during a download ends its connection after it).
    The chunked path read on while it sent; a request dropped here was never answered,
    which a client retries."""
    raw = transport.get_extra_info("socket")
    if raw is None:
        return
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(raw.fileno())) as sock:
        sock.setblocking(False)
        for _ in range(DISCARD_READS):
            if not sock.recv(65536):
                break


async def _send_slices(
    cycle: RequestResponseCycle, writing: asyncio.BaseProtocol, file: BinaryIO, count: int
) -> int:
    """Send the first ``count`` bytes of ``file`` on ``cycle``'s connection, ``SLICE`` bytes
    a ``sendfile(2)`` at most, as ``loop.sendfile`` did: after what the transport holds,
    reading paused meanwhile. The bytes sent: fewer when the file ends early or the
    connection is lost (a client that stopped reading, cut off by the send deadline)."""
    transport = cycle.transport
    await _flushed(cycle)
    loop = asyncio.get_running_loop()
    reading = transport.is_reading()
    transport.pause_reading()
    # A descriptor of our own on the connection's socket: the loop refuses to watch the
    # transport's for us, and the transport may close its own while we wait.
    out = os.dup(transport.get_extra_info("socket").fileno())
    sent = 0
    try:
        while sent < count and not transport.is_closing():
            try:
                n = os.sendfile(out, file.fileno(), sent, min(SLICE, count - sent))
            except BlockingIOError:
                await _writable(loop, out, cycle, writing)
                continue
            if n == 0:
                break
            sent += n
            await asyncio.sleep(0)  # the loop's other work between slices
    finally:
        os.close(out)
        if reading:
            transport.resume_reading()
    return sent


async def _flushed(cycle: RequestResponseCycle) -> None:
    """Wait until the transport has written what it holds (this answer's headers, the end of
    an earlier one) to the socket, or the connection is lost."""
    transport = cycle.transport
    if not transport.get_write_buffer_size():
        return
    low, high = transport.get_write_buffer_limits()
    # With both marks 0 the transport pauses the protocol's writing until it holds nothing
    # (the send deadline running meanwhile), then resumes it.
    transport.set_write_buffer_limits(high=0, low=0)
    try:
        await cycle.flow.drain()
    finally:
        transport.set_write_buffer_limits(high=high, low=low)


async def _writable(
    loop: asyncio.AbstractEventLoop,
    fd: int,
    cycle: RequestResponseCycle,
    writing: asyncio.BaseProtocol,
) -> None:
    """Wait until the socket ``fd`` takes bytes again or the connection is lost, ``writing``
    told of the wait as the transport tells it of its own."""
    writing.pause_writing()
    loop.add_writer(fd, writing.resume_writing)
    try:
        await cycle.flow.drain()  # resumed by the socket, or by the connection's loss
    finally:
        loop.remove_writer(fd)
