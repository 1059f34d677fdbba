"""The ASGI ``http.response.pathsend`` extension on ``tracestore serve``'s protocol: a
response body sent from a file by the kernel (``sendfile``), never through Python.

Starlette's ``FileResponse`` sends ``{"type": "http.response.pathsend", "path": ...}``
instead of the file's bytes in ``http.response.body`` messages when the scope offers the
extension, for a whole file (a ranged answer is read and sent in chunks as before). Read
and sent in chunks, a blob cost the server a copy out of the page cache into Python and
another into the socket, plus a thread hop per chunk: most of a download's server CPU,
taken from the client on a small machine. Through ``loop.sendfile`` the file goes from
the page cache to the socket directly, ``SLICE`` bytes a call at most (a call holds the
event loop while it copies).

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


def offer_pathsend(cycle: RequestResponseCycle, loop: asyncio.AbstractEventLoop) -> None:
    """Offer the extension to ``cycle``'s request and answer its pathsend message, if
    ``loop`` sends files natively (asyncio's selector loop, which ``tracestore serve``
    runs; uvloop has no ``loop.sendfile``). Call before the cycle's app task first runs (it
    looks ``cycle.send`` up then). Not for a request with a body (a GET may have one): the
    app never reads it when the file goes out by sendfile, and a connection closed after
    the answer (``Connection: close``, HTTP/1.0) with the body's rest unread in the kernel
    is reset, the answer's last megabytes still in the socket's send buffer lost with it.
    Sent in chunks, Starlette's ``FileResponse`` reads the body as it sends (it waits on
    ``receive()`` for the client's disconnect)."""
    if not isinstance(loop, BaseSelectorEventLoop) or _has_body(cycle.scope["headers"]):
        return
    extensions = cast(dict[str, Any], cycle.scope.setdefault("extensions", {}))
    extensions[PATHSEND] = {}
    ordinary: Send = cycle.send

    async def send(message: Any) -> None:
        if message.get("type") == PATHSEND:
            await _send_path(cycle, str(message["path"]))
        else:
            await ordinary(message)

    # An instance attribute shadows the method: run_asgi hands the app ``self.send``.
    cycle.send = send  # type: ignore[method-assign]


def _has_body(headers: Any) -> bool:
    return any(
        name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0")
        for name, value in headers
    )


async def _send_path(cycle: RequestResponseCycle, path: str) -> None:
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
                sent = await _send_slices(transport, file, expected)
    except OSError as exc:  # the client went away mid-file, or the file did
        log.info("a file's answer ended early: %s", exc)
    if sent != expected:
        # The body cannot be finished: the client must not take what came as the whole.
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


async def _send_slices(transport: asyncio.Transport, file: BinaryIO, count: int) -> int:
    """Send the first ``count`` bytes of ``file`` by ``loop.sendfile``, ``SLICE`` bytes at a
    time; the bytes sent (fewer when the file ends early or the transport closes)."""
    loop = asyncio.get_running_loop()
    sent = 0
    while sent < count and not transport.is_closing():
        # (A count of 0 would be "to the end".)
        n = await loop.sendfile(transport, file, sent, min(SLICE, count - sent))
        if n == 0:
            break
        sent += n
    return sent
