"""server/serving/body_protocol.py: the ``tracestore.receive_into`` extension, through a real
uvicorn on a free port (a bare ASGI app that hashes what it is handed) and raw sockets, so the cases
plain HTTP clients never produce are produced: a body that came with its headers, requests
pipelined behind a body, ``Expect: 100-continue``, a client that goes away mid-body."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.requests import ClientDisconnect

from tests.support.httpserver import uvicorn_serving
from tracestore.server.serving import body_protocol as protocol
from tracestore.server.serving import connections
from tracestore.server.serving.body_protocol import (
    HTTP_PROTOCOL,
    BodyProtocol,
    _run_pump,
    receive_into,
)

pytestmark = pytest.mark.slow  # a real uvicorn, raw sockets and trickling bodies


class HashingApp:
    """``PUT /sink`` answers the body's SHA-256 and length, and whether it came through the
    extension; ``PUT /fail`` has its sink raise after the first slice; ``PUT /finish``
    takes its answer from the extension's ``finish`` (``PUT /finish-fail``: ``finish``
    raises); ``GET`` answers ``ok``. ``events`` records how each request ended."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        status, payload = 200, {"ok": True}
        if scope["method"] == "PUT":
            status, payload = await self._put(scope, receive)
        body = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _put(self, scope: dict[str, Any], receive: Any) -> tuple[int, dict[str, Any]]:
        digest = hashlib.sha256()
        length = 0
        slices = 0

        def sink(view: memoryview) -> None:
            nonlocal length, slices
            if scope["path"] == "/fail" and slices:
                raise OSError("disk full")
            digest.update(view)
            length += len(view)
            slices += 1

        def finish() -> dict[str, Any]:
            if scope["path"] == "/finish-fail":
                raise ValueError("bad checksum")
            # On the thread that handed over the last slice, and after it.
            return {"thread": threading.current_thread().name, "length": length}

        into = receive_into(scope)
        try:
            if into is not None and scope["path"].startswith("/finish"):
                finished = await into(sink, finish)
                self.events.append("finished")
                return 200, finished
            if into is not None:
                await into(sink)
            else:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise ClientDisconnect()
                    sink(memoryview(message["body"]))
                    if not message.get("more_body"):
                        break
        except ClientDisconnect:
            self.events.append("disconnect")
            return 400, {"error": "disconnect"}
        except OSError as exc:
            self.events.append("failed")
            return 500, {"error": str(exc)}
        except ValueError as exc:
            self.events.append("finish failed")
            return 422, {"error": str(exc)}
        self.events.append("received")
        via = "into" if into is not None else "receive"
        return 200, {"sha256": digest.hexdigest(), "length": length, "via": via}


@pytest.fixture
def served() -> Iterator[tuple[int, HashingApp]]:
    app = HashingApp()
    with uvicorn_serving(app) as port:
        yield port, app


def put(conn: http.client.HTTPConnection, path: str, body: bytes) -> dict[str, Any]:
    conn.request("PUT", path, body=body, headers={"Content-Length": str(len(body))})
    response = conn.getresponse()
    payload: dict[str, Any] = json.loads(response.read())
    return payload


def read_responses(sock: socket.socket, count: int) -> list[tuple[int, dict[str, Any]]]:
    """``count`` responses read off a raw socket, in order."""
    reader = sock.makefile("rb")
    answers = []
    for _ in range(count):
        status_line = reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while (line := reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        answers.append((status, json.loads(reader.read(length))))
    return answers


def put_head(path: str, length: int, *headers: bytes) -> bytes:
    """A PUT's request line and headers, as a raw socket sends them."""
    lines = [b"PUT %s HTTP/1.1" % path.encode(), b"Host: x", *headers]
    return b"\r\n".join([*lines, b"Content-Length: %d" % length, b"", b""])


def expected(body: bytes) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(body).hexdigest(), "length": len(body), "via": "into"}


def test_serve_runs_the_body_protocol() -> None:
    module, _, name = HTTP_PROTOCOL.partition(":")
    assert getattr(__import__(module, fromlist=[name]), name) is BodyProtocol


def test_bodies_on_one_connection_come_whole_through_the_extension(
    served: tuple[int, HashingApp],
) -> None:
    port, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    bodies = [os.urandom(5 * 1024 * 1024 + 17), b"", os.urandom(3), os.urandom(1024 * 1024)]
    for body in bodies:
        assert put(conn, "/sink", body) == expected(body)
        # The connection's parser starts afresh after each body: the next request parses.
        conn.request("GET", "/")
        assert json.loads(conn.getresponse().read()) == {"ok": True}
    conn.close()


def test_finish_runs_on_the_body_thread_and_its_error_keeps_the_connection(
    served: tuple[int, HashingApp],
) -> None:
    port, app = served
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for body in (os.urandom(3 * 1024 * 1024 + 5), b"x"):
        answer = put(conn, "/finish", body)
        assert answer["length"] == len(body)
        assert answer["thread"].startswith("tracestore-body")
    # finish's error is raised once the whole body is read and the connection is ready for
    # its next request: the same connection answers it.
    body = os.urandom(2 * 1024 * 1024)
    conn.request("PUT", "/finish-fail", body=body, headers={"Content-Length": str(len(body))})
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())) == (422, {"error": "bad checksum"})
    assert put(conn, "/sink", body) == expected(body)
    conn.close()
    assert app.events == ["finished", "finished", "finish failed", "received"]


def test_a_body_sent_in_small_pieces_arrives_whole(served: tuple[int, HashingApp]) -> None:
    port, _ = served
    body = os.urandom(200_000)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(put_head("/sink", len(body)))
        for start in range(0, len(body), 7_000):
            sock.sendall(body[start : start + 7_000])
            time.sleep(0.002)
        assert read_responses(sock, 1) == [(200, expected(body))]


def test_requests_pipelined_behind_a_body_are_answered_in_order(
    served: tuple[int, HashingApp],
) -> None:
    port, _ = served
    small, large = os.urandom(10), os.urandom(3 * 1024 * 1024)
    get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        # A whole request (headers and body) and another behind it in one packet, then a
        # large body with a request behind it: the next request's bytes wait on the socket.
        sock.sendall(put_head("/sink", len(small)) + small + get)
        sock.sendall(put_head("/sink", len(large)) + large + get)
        assert read_responses(sock, 4) == [
            (200, expected(small)),
            (200, {"ok": True}),
            (200, expected(large)),
            (200, {"ok": True}),
        ]


def test_expect_100_continue_is_answered_before_the_body_is_read(
    served: tuple[int, HashingApp],
) -> None:
    port, _ = served
    body = os.urandom(2 * 1024 * 1024)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(put_head("/sink", len(body), b"Expect: 100-continue"))
        interim = b""
        while not interim.endswith(b"\r\n\r\n"):
            interim += sock.recv(1)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        assert read_responses(sock, 1) == [(200, expected(body))]


def wait_for(app: HashingApp, event: str, count: int = 1) -> None:
    """Until ``app`` has recorded ``event`` ``count`` times (10 s at most)."""
    deadline = time.monotonic() + 10
    while app.events.count(event) < count:
        assert time.monotonic() < deadline, f"not {count} {event!r} in {app.events}"
        time.sleep(0.01)


def test_a_client_gone_mid_body_is_a_disconnect_and_the_server_goes_on(
    served: tuple[int, HashingApp],
) -> None:
    port, app = served
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(put_head("/sink", 4_000_000))
        sock.sendall(os.urandom(1_500_000))
        time.sleep(0.2)
    wait_for(app, "disconnect")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = os.urandom(100)
    assert put(conn, "/sink", body) == expected(body)


def test_a_failed_sink_closes_the_connection_after_its_answer(
    served: tuple[int, HashingApp],
) -> None:
    port, app = served
    body = os.urandom(3 * 1024 * 1024)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(put_head("/fail", len(body)))
        sock.sendall(body)
        assert read_responses(sock, 1) == [(500, {"error": "disk full"})]
        # The rest of the body may still be unread: the server serves this connection no more
        # (closed, or reset when unread bytes were left in its buffer).
        sock.settimeout(10)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(1) == b""
    assert app.events == ["failed"]


def test_a_chunked_body_takes_the_ordinary_path(served: tuple[int, HashingApp]) -> None:
    port, _ = served
    body = os.urandom(300_000)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("PUT", "/sink", body=iter([body[:100_000], body[100_000:]]), encode_chunked=True)
    answer = json.loads(conn.getresponse().read())
    assert answer == {**expected(body), "via": "receive"}


def test_a_client_that_resets_mid_body_is_a_disconnect(served: tuple[int, HashingApp]) -> None:
    port, app = served
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(put_head("/sink", 4_000_000))
    sock.sendall(os.urandom(300_000))
    time.sleep(0.2)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # with a zero linger: a reset, not an orderly close
    wait_for(app, "disconnect")


def test_a_cancelled_receive_returns_only_once_the_sink_is_done() -> None:
    # Whoever cleans up behind the sink (closing the file it writes to) runs after the
    # cancellation surfaces: by then no slice may still be handed over.
    events: list[str] = []

    def slow_sink(view: memoryview) -> None:
        events.append("sink start")
        time.sleep(0.3)
        events.append("sink end")

    async def main() -> None:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            theirs.sendall(b"x" * 100_000)
            task = asyncio.create_task(
                _run_pump(ours, b"early", 10_000_000, slow_sink, lambda: None)
            )
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            events.append("cancelled")

    asyncio.run(main())
    assert events[-1] == "cancelled" and events[-2] == "sink end"


def test_idle_bodies_hold_no_thread_and_other_bodies_keep_flowing(
    served: tuple[int, HashingApp],
) -> None:
    # More senders than there are body threads, each stopped after one byte of its body.
    port, app = served
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(100)]
    try:
        for sock in idle:
            sock.sendall(put_head("/sink", 1_000_000) + b"x")
        time.sleep(0.5)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for _ in range(3):
            body = os.urandom(2 * 1024 * 1024)
            assert put(conn, "/sink", body) == expected(body)
    finally:
        for sock in idle:
            sock.close()
    wait_for(app, "disconnect", len(idle))


def test_a_body_that_bursts_trickles_and_pauses_arrives_whole(
    served: tuple[int, HashingApp],
) -> None:
    # Each change of pace moves the body between a body thread and the event loop.
    port, _ = served
    body = os.urandom(3 * 1024 * 1024 + 5)
    pieces = [(0, 300_000, 0.0)] + [(0, 1, 0.01)] * 40 + [(0, 100_000, 0.3), (0, 3, 0.3)]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(put_head("/sink", len(body)))
        sent = 0
        for _, size, pause in pieces:
            sock.sendall(body[sent : sent + size])
            sent += size
            time.sleep(pause)
        sock.sendall(body[sent:])
        assert read_responses(sock, 1) == [(200, expected(body))]


def test_trickling_bodies_hold_no_thread_and_other_bodies_keep_flowing(
    served: tuple[int, HashingApp],
) -> None:
    # More senders than there are body threads, each sending a byte every 20 ms: never
    # idle for long enough to park, far too slow to deserve a thread.
    port, app = served
    trickling = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(100)]
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.02):
            for sock in trickling:
                with contextlib.suppress(OSError):
                    sock.send(b"x")

    for sock in trickling:
        sock.sendall(put_head("/sink", 1_000_000))
    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        time.sleep(0.5)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        started = time.monotonic()
        for _ in range(3):
            body = os.urandom(2 * 1024 * 1024)
            assert put(conn, "/sink", body) == expected(body)
        # ~1 s here; a body waiting for a thread would wait out the 10 s socket timeout.
        assert time.monotonic() - started < 9
    finally:
        stop.set()
        sender.join(timeout=5)
        for sock in trickling:
            sock.close()
    wait_for(app, "disconnect", len(trickling))


@pytest.mark.parametrize(
    ("limits", "pause"),
    [
        ({"MIN_RATE": 50_000, "RATE_GRACE": 0.5}, 0.1),  # ~10 kB/s: too slow
        ({"MIN_RATE": 1, "BODY_DEADLINE": 1.0}, 0.01),  # fast enough, but never ends
    ],
)
def test_a_body_that_trickles_is_cut_off(
    served: tuple[int, HashingApp],
    monkeypatch: pytest.MonkeyPatch,
    limits: dict[str, float],
    pause: float,
) -> None:
    port, app = served
    for name, value in limits.items():
        monkeypatch.setattr(protocol, name, value)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(put_head("/sink", 10_000_000))
        with contextlib.suppress(OSError):  # the server closes the connection on us
            while "disconnect" not in app.events and time.monotonic() - started < 10:
                sock.sendall(b"x" * 1000)
                time.sleep(pause)
    assert "disconnect" in app.events
    assert time.monotonic() - started < 9  # ~1 s here; the sender gives up at 10


def test_a_body_read_through_receive_that_trickles_is_cut_off(
    served: tuple[int, HashingApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body without the extension (chunked here; JSON bodies, which the app reads through
    ``receive()``) was held as long as its sender trickled (issue 41): it keeps the same
    pace as a part body, or its connection is closed."""
    port, app = served
    monkeypatch.setattr(connections, "MIN_RATE", 50_000)
    monkeypatch.setattr(connections, "RATE_GRACE", 0.5)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"PUT /sink HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        with contextlib.suppress(OSError):  # the server closes the connection on us
            while "disconnect" not in app.events and time.monotonic() - started < 10:
                sock.sendall(b"3e8\r\n" + b"x" * 1000 + b"\r\n")  # ~10 kB/s
                time.sleep(0.1)
        _wait_closed(sock)
    assert app.events == ["disconnect"]
    assert time.monotonic() - started < 9  # ~1 s here; the sender gives up at 10


def test_a_chunked_body_at_pace_is_received_whole(served: tuple[int, HashingApp]) -> None:
    port, app = served
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"PUT /sink HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(3):
            sock.sendall(b"3e8\r\n" + b"x" * 1000 + b"\r\n")
        sock.sendall(b"0\r\n\r\n")
        [(status, answer)] = read_responses(sock, 1)
    assert (status, answer["length"], answer["via"]) == (200, 3000, "receive")
    assert app.events == ["received"]


def _wait_closed(sock: socket.socket) -> None:
    """Return once the server has closed ``sock``; TimeoutError after 10 s."""
    sock.settimeout(10)
    with contextlib.suppress(ConnectionError):
        while sock.recv(65536):
            pass  # the 400 the app answered, if it got out first
