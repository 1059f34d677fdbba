"""server/serving/pathsend.py: the ``http.response.pathsend`` extension through a real uvicorn
running ``BodyProtocol``, answered by Starlette's ``FileResponse`` (what the local store's
blob route sends): whole files go out by ``sendfile``, ranges and HEAD the ordinary way,
and an answer that cannot be finished closes its connection without taking the server
with it."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route
from uvicorn.protocols.http.flow_control import FlowControl

from tests.support.httpserver import uvicorn_serving
from tracestore.server.serving.pathsend import PATHSEND, SLICE, _send_slices

pytestmark = pytest.mark.slow  # a real uvicorn, raw sockets and timed waits


class FilesApp:
    """``GET /files/{name}`` a file of ``root`` (``/stale/{name}``: with the size it had
    when ``stale`` was taken; ``/slow/{name}``: after 0.3 s), ``GET /json`` a small JSON
    answer; ``sent`` records the type of every body message the app sends, and ``offered``
    whether each request's scope offered the extension."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.stale: dict[str, os.stat_result] = {}
        self.sent: list[str] = []
        self.offered: list[bool] = []
        self.ended = threading.Event()  # a request's call has returned
        self.app = Starlette(
            routes=[
                Route("/files/{name}", self.file, methods=["GET", "HEAD"]),
                Route("/stale/{name}", self.stale_file),
                Route("/slow/{name}", self.slow_file),
                Route("/json", self.json),
            ]
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.offered.append(PATHSEND in scope.get("extensions", {}))

        async def recording(message: MutableMapping[str, Any]) -> None:
            if message["type"] != "http.response.start":
                self.sent.append(message["type"])
            await send(message)

        try:
            await self.app(scope, receive, recording)
        finally:
            self.ended.set()

    async def file(self, request: Request) -> Response:
        return FileResponse(self.root / request.path_params["name"])

    async def slow_file(self, request: Request) -> Response:
        await asyncio.sleep(0.3)
        return await self.file(request)

    async def stale_file(self, request: Request) -> Response:
        name = request.path_params["name"]
        return FileResponse(self.root / name, stat_result=self.stale[name])

    async def json(self, request: Request) -> Response:
        return JSONResponse({"ok": True})


@pytest.fixture
def files(tmp_path: Path) -> Iterator[tuple[int, FilesApp]]:
    app = FilesApp(tmp_path)
    # As ``tracestore serve`` runs it; uvicorn's own logging left alone, so that caplog sees
    # its error lines.
    with uvicorn_serving(app, loop="asyncio", log_config=None) as port:
        yield port, app


def get(conn: http.client.HTTPConnection, path: str, **headers: str) -> tuple[int, bytes]:
    conn.request("GET", path, headers=headers)
    answer = conn.getresponse()
    return answer.status, answer.read()


def test_whole_files_go_out_through_pathsend_on_a_kept_alive_connection(
    files: tuple[int, FilesApp], caplog: pytest.LogCaptureFixture
) -> None:
    port, app = files
    big, small = os.urandom(9 * 1024 * 1024 + 17), os.urandom(5)
    (app.root / "big").write_bytes(big)
    (app.root / "small").write_bytes(small)
    (app.root / "empty").write_bytes(b"")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    # Bigger than the socket buffers, so that the kernel sends it in several goes.
    assert get(conn, "/files/big") == (200, big)
    assert get(conn, "/json") == (200, b'{"ok":true}')
    assert get(conn, "/files/empty") == (200, b"")
    assert get(conn, "/files/small") == (200, small)
    conn.close()
    assert app.offered == [True] * 4
    assert app.sent == [PATHSEND, "http.response.body", PATHSEND, PATHSEND]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_range_and_a_head_are_answered_the_ordinary_way(files: tuple[int, FilesApp]) -> None:
    port, app = files
    data = os.urandom(3 * 1024 * 1024)
    (app.root / "blob").write_bytes(data)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    assert get(conn, "/files/blob", Range="bytes=1000-") == (206, data[1000:])
    conn.request("HEAD", "/files/blob")
    head = conn.getresponse()
    length = head.getheader("content-length")
    assert (head.status, head.read(), length) == (200, b"", str(len(data)))
    assert get(conn, "/files/blob") == (200, data)
    conn.close()
    assert set(app.sent[:-1]) == {"http.response.body"}
    assert app.sent[-1] == PATHSEND


def test_pipelined_requests_behind_a_file_are_answered_in_order(
    files: tuple[int, FilesApp],
) -> None:
    port, app = files
    data = os.urandom(4 * 1024 * 1024)
    (app.root / "blob").write_bytes(data)
    request = b"GET /files/blob HTTP/1.1\r\nHost: t\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request + b"GET /json HTTP/1.1\r\nHost: t\r\n\r\n" + request)
        reader = sock.makefile("rb")
        bodies = []
        for _ in range(3):
            assert reader.readline().startswith(b"HTTP/1.1 200")
            length = None
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            assert length is not None
            bodies.append(reader.read(length))
    assert bodies == [data, b'{"ok":true}', data]


class Writing(asyncio.Protocol):
    """A connection's protocol as uvicorn's: the transport pauses and resumes its flow."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.flow = FlowControl(cast(asyncio.Transport, transport))

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()


def test_a_file_goes_out_after_what_the_transport_still_holds(tmp_path: Path) -> None:
    # sendfile(2) writes to the socket past the transport: the file must wait until the
    # transport has written what it holds (an earlier answer's end, the file's headers).
    held, data = b"h" * (1024 * 1024), os.urandom(4 * 1024 * 1024)
    (tmp_path / "blob").write_bytes(data)
    server, client = socket.socketpair()
    received = bytearray()

    def read() -> None:
        while len(received) < len(held) + len(data) and (chunk := client.recv(1 << 20)):
            received.extend(chunk)

    async def send() -> int:
        writing = Writing()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(lambda: writing, server)
        try:
            transport.write(held)  # more than the socket takes: the transport keeps some
            assert transport.get_write_buffer_size() > 0
            # The client reads while the event loop does not run: the socket takes bytes
            # again before the transport has written the rest.
            time.sleep(0.3)
            cycle = SimpleNamespace(transport=transport, flow=writing.flow)
            with open(tmp_path / "blob", "rb") as file:
                sent = await _send_slices(cast(Any, cycle), writing, file, len(data))
            assert transport.get_write_buffer_limits() == (16 * 1024, 64 * 1024)  # as it was
            return sent
        finally:
            transport.close()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert asyncio.run(send()) == len(data)
        reader.join(10)
    finally:
        client.close()
    assert received == held + data


def test_a_file_shorter_than_its_answer_closes_the_connection(
    files: tuple[int, FilesApp], caplog: pytest.LogCaptureFixture
) -> None:
    port, app = files
    path = app.root / "shrinks"
    path.write_bytes(os.urandom(2 * 1024 * 1024))
    app.stale["shrinks"] = path.stat()
    path.write_bytes(b"short")  # the file changed on disk after its size was taken
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/stale/shrinks")
    answer = conn.getresponse()
    assert answer.status == 200
    # Never taken for the whole: the body ends early, the connection with it.
    with pytest.raises(http.client.IncompleteRead):
        answer.read()
    conn.close()
    assert any("shorter than the 2097152 bytes" in r.getMessage() for r in caplog.records)
    # No "ASGI callable returned without completing response" from uvicorn.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    fresh = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    assert get(fresh, "/json") == (200, b'{"ok":true}')


def test_a_client_gone_mid_file_leaves_the_server_serving(
    files: tuple[int, FilesApp], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tracestore")
    port, app = files
    data = os.urandom(64 * 1024 * 1024)  # more than the socket buffers hold
    (app.root / "blob").write_bytes(data)
    for linger in (False, True):  # an orderly close, then a reset
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(b"GET /files/blob HTTP/1.1\r\nHost: t\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(0.2)  # the server is waiting for the socket to drain
        if linger:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    deadline = time.monotonic() + 10
    while sum("ended early" in r.getMessage() for r in caplog.records) < 2:
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.05)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    assert get(conn, "/files/blob") == (200, data)
    with contextlib.suppress(OSError):
        conn.close()


def test_a_client_gone_before_the_answer_starts_is_no_error(
    files: tuple[int, FilesApp], caplog: pytest.LogCaptureFixture
) -> None:
    port, app = files
    (app.root / "blob").write_bytes(os.urandom(1024))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /slow/blob HTTP/1.1\r\nHost: t\r\n\r\n")
    # The answer was started and its file sent to nobody (the call's end, however long a
    # loaded machine takes to reach it; then a moment for uvicorn to say anything of it).
    assert app.ended.wait(30)
    time.sleep(0.2)
    assert app.sent == [PATHSEND]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_on_uvloop_the_extension_is_not_offered(tmp_path: Path) -> None:
    app = FilesApp(tmp_path)
    data = os.urandom(2 * 1024 * 1024)
    (tmp_path / "blob").write_bytes(data)
    with uvicorn_serving(app, loop="uvloop") as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        assert get(conn, "/files/blob") == (200, data)
        conn.close()
    assert app.offered == [False]
    assert set(app.sent) == {"http.response.body"}


def test_a_get_with_a_body_on_a_closing_connection_gets_the_whole_file(
    files: tuple[int, FilesApp],
) -> None:
    # Sent by sendfile, the file left the body unread in the kernel; closed that way, the
    # connection was reset and the file's last megabytes, still in the socket's send
    # buffer, lost.
    port, app = files
    data = os.urandom(32 * 1024 * 1024)
    (app.root / "blob").write_bytes(data)
    body = b"b" * (1024 * 1024)  # more than uvicorn reads ahead of the app (64 KiB)
    for version, extra in (("1.1", "Connection: close\r\n"), ("1.0", "")):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            head = f"GET /files/blob HTTP/{version}\r\nHost: t\r\nContent-Length: {len(body)}\r\n"
            sender = threading.Thread(
                target=sock.sendall, args=(head.encode() + extra.encode() + b"\r\n" + body,)
            )
            sender.start()
            answer = bytearray()
            while chunk := sock.recv(1024 * 1024):
                answer += chunk
            sender.join()
        head_end = answer.index(b"\r\n\r\n") + 4
        assert answer.startswith(b"HTTP/1.1 200")
        assert answer[head_end:] == data, (version, len(answer) - head_end)


def test_no_sendfile_call_holds_the_event_loop_for_more_than_a_slice(
    files: tuple[int, FilesApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    # asyncio asks sendfile(2) for all the count has left, and over loopback one call
    # copied 4-13 MiB while the event loop waited: /healthz took 20-100 ms with 4
    # downloads running through ``tracestore serve`` (2 ms with the chunked path).
    port, app = files
    data = os.urandom(24 * 1024 * 1024 + 5)
    (app.root / "blob").write_bytes(data)
    calls: list[tuple[int, int]] = []
    sendfile = os.sendfile

    def recording(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        sent = sendfile(out_fd, in_fd, offset, count)
        calls.append((count, sent))
        return sent

    monkeypatch.setattr(os, "sendfile", recording)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    assert get(conn, "/files/blob") == (200, data)
    conn.close()
    assert app.sent == [PATHSEND]
    # The client can read the last slice before the server's thread, back from sendfile(2),
    # has recorded it: wait for the record, not for the bytes.
    deadline = time.monotonic() + 10
    while sum(sent for _, sent in calls) < len(data) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sum(sent for _, sent in calls) == len(data)
    assert max(count for count, _ in calls) <= SLICE


def test_a_shutdown_mid_file_ends_the_connection_after_the_whole_file(tmp_path: Path) -> None:
    # Reading pauses while the file goes out, so a request pipelined mid-file was still
    # unread in the kernel when the shutdown closed the connection after the file: the
    # close was a reset, and the file's tail, still in the send buffer, was lost.
    app = FilesApp(tmp_path)
    data = os.urandom(32 * 1024 * 1024)
    (tmp_path / "blob").write_bytes(data)
    stopping = threading.Event()
    answer = bytearray()

    def read_after_the_shutdown(sock: socket.socket) -> None:
        stopping.wait()
        time.sleep(0.5)  # uvicorn looks at should_exit every 0.1 s
        with contextlib.suppress(OSError):
            while chunk := sock.recv(1024 * 1024):
                answer.extend(chunk)

    with uvicorn_serving(app, loop="asyncio", log_config=None) as port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
        sock.sendall(b"GET /files/blob HTTP/1.1\r\nHost: t\r\n\r\n")
        answer += sock.recv(65536)
        time.sleep(0.2)  # the server is waiting for the socket to drain
        sock.sendall(b"GET /json HTTP/1.1\r\nHost: t\r\n\r\n")
        time.sleep(0.2)
        reader = threading.Thread(target=read_after_the_shutdown, args=(sock,))
        reader.start()
        stopping.set()
    reader.join(timeout=10)
    sock.close()
    head_end = answer.index(b"\r\n\r\n") + 4
    assert answer[head_end : head_end + len(data)] == data, len(answer) - head_end
