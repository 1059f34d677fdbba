"""tracestore/client/sendfile.py: part bodies sent with ``sendfile`` on the client's own kept-alive
connections, against a small real HTTP server that can misbehave on cue (drop a connection
mid-body, answer 503, close an idle connection), through ``put_part`` as the uploader calls
it. API calls over the same connections are tests/test_api_transport.py's; the other paths
(httpx's transport, a caller's own ``httpx.Client``) are the ones tests/test_client*.py
drive."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest

from tests.support.httpserver import serving
from tracestore.client import Client
from tracestore.client.local_files import LocalFile
from tracestore.client.parts import PartBody, PartJob, put_part, read_back
from tracestore.client.retries import RetryPolicy
from tracestore.client.sendfile import SendfileTransport, default_transport
from tracestore.client.transfers import Stopped
from tracestore.errors import IntegrityError, TracestoreError
from tracestore.filedigest import FileDigest

MIB = 1024 * 1024


@dataclass
class Script:
    """What the server does with each PUT, in turn (then ``ok``), and what it saw."""

    steps: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    connections: set[tuple[str, int]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    dropped: threading.Event = field(default_factory=threading.Event)  # by "close-later"

    def next(self) -> str:
        with self.lock:
            return self.steps.pop(0) if self.steps else "ok"


def handler_for(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_PUT(self) -> None:
            script.connections.add(self.client_address)
            step = script.next()
            length = int(self.headers["Content-Length"])
            if step == "early-403":
                # As Go's net/http (MinIO) does: answer before reading a large body, read a
                # little of it, close.
                self._answer(403, b'{"error": {"code": "FORBIDDEN", "message": "expired"}}')
                self.connection.settimeout(0.5)
                with contextlib.suppress(OSError):
                    self.connection.recv(256 * 1024)
                self.close_connection = True
                return
            if step == "drop":
                self.rfile.read(length // 2)
                self.close_connection = True
                return
            body = self.rfile.read(length)
            if len(body) < length:  # the client went away mid-body
                self.close_connection = True
                return
            if step == "503":
                self._answer(503, b'{"error": {"code": "unavailable", "message": "busy"}}')
                return
            script.bodies.append(body)
            script.headers.append(dict(self.headers))
            self._answer(200, b"", etag=hashlib.md5(body).hexdigest())
            if step == "close-later":
                # Keep-alive promised, then the server drops the idle connection.
                threading.Timer(0.05, self._drop).start()

        def _drop(self) -> None:
            self.connection.shutdown(socket.SHUT_RDWR)
            script.dropped.set()

        def _answer(self, status: int, body: bytes, etag: str | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            if etag:
                self.send_header("ETag", f'"{etag}"')
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    with serving(handler_for(script)) as url:
        yield url, script


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30, transport=SendfileTransport()) as client:
        yield client


def written(path: Path, size: int) -> tuple[Path, bytes]:
    """``path`` holding ``size`` random bytes, and the bytes."""
    data = os.urandom(size)
    path.write_bytes(data)
    return path, data


def job_for(path: Path, data: bytes, number: int, part_size: int, url: str) -> PartJob:
    stat = path.stat()
    local = LocalFile(path.name, path, len(data), "primary", stat.st_mtime_ns)
    digest = FileDigest(len(data), part_size, read_back(path, threading.Event()))
    offset = (number - 1) * part_size
    size = min(part_size, len(data) - offset)
    return PartJob(local, digest, number, offset, size, url=f"{url}/p/{number}?sig=x")


def send(
    http: httpx.Client,
    job: PartJob,
    stop: threading.Event | None = None,
    attempts: int = 3,
    fresh_url: Callable[[PartJob], str] = lambda j: j.url,
) -> str:
    return put_part(
        http,
        job,
        retry=RetryPolicy(attempts=attempts, base_delay=0.01),
        stop=stop or threading.Event(),
        progress=None,
        total=job.size,
        fresh_url=fresh_url,
    )


def test_parts_go_whole_over_kept_alive_connections_and_hash_the_file(
    server: tuple[str, Script], http: httpx.Client, tmp_path: Path
) -> None:
    url, script = server
    path, data = written(tmp_path / "rank0.bin", 5 * MIB + 321)
    part_size = 2 * MIB
    jobs = [job_for(path, data, n, part_size, url) for n in (1, 2, 3)]
    digest = FileDigest(len(data), part_size, read_back(path, threading.Event()))
    jobs = [PartJob(j.file, digest, j.part_number, j.offset, j.size, url=j.url) for j in jobs]
    etags = [send(http, job) for job in jobs]
    assert b"".join(script.bodies) == data
    assert etags == [hashlib.md5(b).hexdigest() for b in script.bodies]
    assert digest.hexdigest({n: e for n, e in enumerate(etags, 1)}) == (
        hashlib.sha256(data).hexdigest()
    )
    assert [h["Content-Length"] for h in script.headers] == ["2097152", "2097152", "1048897"]
    assert len(script.connections) == 1  # one connection, kept alive across the parts


def test_a_dropped_connection_and_a_503_are_retried(
    server: tuple[str, Script], http: httpx.Client, tmp_path: Path
) -> None:
    url, script = server
    path, data = written(tmp_path / "rank0.bin", 3 * MIB)
    script.steps = ["drop", "503"]
    job = job_for(path, data, 1, 4 * MIB, url)
    assert send(http, job) == hashlib.md5(data).hexdigest()
    assert script.bodies == [data]
    assert job.digest.hexdigest({1: hashlib.md5(data).hexdigest()}) == (
        hashlib.sha256(data).hexdigest()
    )


def test_an_idle_connection_the_server_closed_is_not_reused(
    server: tuple[str, Script], http: httpx.Client, tmp_path: Path
) -> None:
    url, script = server
    path, data = written(tmp_path / "rank0.bin", MIB)
    script.steps = ["close-later"]
    send(http, job_for(path, data, 1, 4 * MIB, url))
    assert script.dropped.wait(30)
    time.sleep(0.3)  # the server's end of it reaches the client
    # One attempt only: sent on the stale connection, it would fail.
    send(http, job_for(path, data, 1, 4 * MIB, url), attempts=1)
    assert script.bodies == [data, data]
    assert len(script.connections) == 2


def test_a_stop_ends_the_send_and_a_shrunk_file_is_an_integrity_error(
    server: tuple[str, Script], http: httpx.Client, tmp_path: Path
) -> None:
    url, script = server
    path, data = written(tmp_path / "rank0.bin", 2 * MIB)
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped):
        send(http, job_for(path, data, 1, 4 * MIB, url), stop)
    job = job_for(path, data, 1, 4 * MIB, url)
    path.write_bytes(data[:MIB])
    with pytest.raises(IntegrityError, match="shorter"):
        send(http, job)
    assert script.bodies == []


def test_a_part_over_https_takes_httpx_own_path(tmp_path: Path) -> None:
    seen: list[str] = []

    class Recording(SendfileTransport):
        def _checkout(self, request: httpx.Request, host: str, *args: object) -> object:  # type: ignore[override]
            seen.append(host)
            raise AssertionError("the sendfile path was taken")

    transport = Recording()
    data = b"x" * 10
    path = tmp_path / "f"
    path.write_bytes(data)
    job = job_for(path, data, 1, MIB, "https://127.0.0.1:9")
    transfer = job.digest.transfer(1)
    request = httpx.Request(
        "PUT", job.url, stream=PartBody(job, transfer, threading.Event(), lambda n: None)
    )
    with pytest.raises(httpx.ConnectError):
        transport.handle_request(request)
    assert seen == []
    transport.close()


def test_a_refused_connection_is_a_network_error(tmp_path: Path, http: httpx.Client) -> None:
    path, data = written(tmp_path / "f", 100)
    with pytest.raises(TracestoreError):
        send(http, job_for(path, data, 1, MIB, "http://127.0.0.1:9"))


def test_an_answer_sent_before_the_body_was_read_is_the_answer(
    server: tuple[str, Script], http: httpx.Client, tmp_path: Path
) -> None:
    # An expired URL answered 403 mid-body: the client takes a fresh URL (not a broken pipe
    # retried on the same URL).
    url, script = server
    path, data = written(tmp_path / "rank0.bin", 16 * MIB)
    script.steps = ["early-403"]
    fresh: list[str] = []
    job = job_for(path, data, 1, 16 * MIB, url)

    def fresh_url(j: PartJob) -> str:
        fresh.append(j.url)
        return j.url + "&fresh=1"

    etag = send(http, job, fresh_url=fresh_url)
    assert fresh == [job.url]
    assert etag == hashlib.md5(data).hexdigest() and script.bodies == [data]


def test_a_local_file_error_is_not_a_network_error(
    server: tuple[str, Script], http: httpx.Client, tmp_path: Path
) -> None:
    url, script = server
    path, data = written(tmp_path / "rank0.bin", MIB)
    job = job_for(path, data, 1, 4 * MIB, url)
    path.unlink()
    with pytest.raises(FileNotFoundError):
        send(http, job)
    assert script.bodies == []


def test_a_proxy_in_the_environment_leaves_every_request_to_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = httpx.Limits()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(default_transport(limits), SendfileTransport)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert default_transport(limits) is None
    with Client("http://127.0.0.1:9", "token") as client:
        assert not isinstance(client.http._transport, SendfileTransport)
        assert client.http._mounts  # httpx mounted the proxy
