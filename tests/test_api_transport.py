"""The API's calls over ``http://`` on the client's own connections
(tracestore/client/sendfile.py ``SendfileTransport._exchange``), against a small real HTTP
server: bodies sent whole, answers read as httpx reads them (length-delimited, chunked,
gzip, none), connections kept only when an answer was read to its end, failures as httpx's
errors, and httpx's own transport (its CA bundle, httpcore) built only for a request that
needs it."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from tests.httpserver import serving
from tracestore.client import Client
from tracestore.client.sendfile import SendfileTransport


@dataclass
class Seen:
    """What the server saw: each request's method, path, body, and the connection it came on."""

    requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    connections: list[tuple[str, int]] = field(default_factory=list)


def handler_for(seen: Seen) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _note(self) -> bytes:
            if self.headers.get("Transfer-Encoding") == "chunked":
                body = b""
                while size := int(self.rfile.readline().strip(), 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
            else:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.requests.append((self.command, self.path, body))
            seen.connections.append(self.client_address)
            return body

        def do_POST(self) -> None:
            body = self._note()
            self._answer(200, json.dumps({"echo": json.loads(body)}).encode())

        def do_HEAD(self) -> None:
            self._note()
            self.send_response(200)
            self.send_header("Content-Length", "1234")
            self.end_headers()

        def do_GET(self) -> None:
            self._note()
            if self.path == "/chunked":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for piece in (b'{"a": ', b"1", b"}"):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")
            elif self.path == "/gzip":
                body = gzip.compress(b'{"zipped": true}')
                self.send_response(200)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif self.path == "/empty":
                self.send_response(204)
                self.end_headers()
            elif self.path == "/closing":
                self.close_connection = True
                self._answer(200, b'{"closing": true}', close=True)
            elif self.path == "/big":
                self._answer(200, b"x" * (4 * 1024 * 1024))
            elif self.path == "/cut":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"y" * 10)
                self.close_connection = True
            else:
                self._answer(404, b'{"error": {"code": "NOT_FOUND", "message": "no such"}}')

        def _answer(self, status: int, body: bytes, close: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if close:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def served() -> Iterator[tuple[str, Seen]]:
    seen = Seen()
    with serving(handler_for(seen)) as url:
        yield url, seen


@pytest.fixture
def transport() -> Iterator[SendfileTransport]:
    transport = SendfileTransport()
    yield transport
    transport.close()


def test_api_calls_share_one_kept_alive_connection_and_never_build_httpx_s_transport(
    served: tuple[str, Seen], transport: SendfileTransport
) -> None:
    url, seen = served
    with httpx.Client(transport=transport, timeout=10) as http:
        assert http.post(f"{url}/run", json={"n": 1}).json() == {"echo": {"n": 1}}
        assert http.get(f"{url}/chunked").json() == {"a": 1}
        assert http.get(f"{url}/gzip").json() == {"zipped": True}
        empty = http.get(f"{url}/empty")
        assert (empty.status_code, empty.content) == (204, b"")
        head = http.head(f"{url}/run")
        assert (head.status_code, head.content) == (200, b"")
        assert http.get(f"{url}/nothing").status_code == 404
        assert http.post(f"{url}/run", json=[2]).json() == {"echo": [2]}
    assert [r[:2] for r in seen.requests] == [
        ("POST", "/run"),
        ("GET", "/chunked"),
        ("GET", "/gzip"),
        ("GET", "/empty"),
        ("HEAD", "/run"),
        ("GET", "/nothing"),
        ("POST", "/run"),
    ]
    assert seen.requests[0][2] == b'{"n":1}'
    assert len(set(seen.connections)) == 1, "one connection kept alive for every call"
    assert transport._httpx is None


def test_a_connection_is_kept_only_after_its_answer_was_read_to_the_end(
    served: tuple[str, Seen], transport: SendfileTransport
) -> None:
    url, seen = served
    with httpx.Client(transport=transport, timeout=10) as http:
        with http.stream("GET", f"{url}/big") as response:
            assert next(response.iter_raw(1024)).startswith(b"x")
        # Abandoned mid-answer: its connection holds the rest, so it is not reused.
        assert http.get(f"{url}/chunked").json() == {"a": 1}
        assert len(http.get(f"{url}/big").content) == 4 * 1024 * 1024
        assert http.get(f"{url}/closing").json() == {"closing": True}
        # Read to the end, but the server said it closes: a new connection after it.
        assert http.get(f"{url}/chunked").json() == {"a": 1}
    first, second, third, closing, last = seen.connections
    assert second != first
    assert third == second and closing == second
    assert last != closing


def test_failures_are_httpx_s_errors(
    served: tuple[str, Seen], transport: SendfileTransport
) -> None:
    url, _ = served
    with httpx.Client(transport=transport, timeout=10) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            http.get(f"{url}/cut")  # 1000 bytes promised, 10 sent, connection closed
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]
        with pytest.raises(httpx.ConnectError):
            http.get(f"http://127.0.0.1:{closed}/")
        # Still usable after both.
        assert http.get(f"{url}/chunked").json() == {"a": 1}
    assert transport._httpx is None


def test_https_and_bodies_of_unknown_length_go_through_httpx_s_own_transport(
    served: tuple[str, Seen], transport: SendfileTransport
) -> None:
    url, seen = served

    def pieces() -> Iterator[bytes]:
        yield b'{"streamed": '
        yield b"true}"

    with httpx.Client(transport=transport, timeout=10) as http:
        # A body httpx sends chunked: httpx's transport, built now.
        assert http.post(f"{url}/run", content=pieces()).json() == {"echo": {"streamed": True}}
        assert transport._httpx is not None
        with pytest.raises(httpx.ConnectError):
            http.get("https://127.0.0.1:9/", timeout=2)
    assert seen.requests[-1][2] == b'{"streamed": true}'


def test_a_command_talking_to_a_plain_http_service_loads_no_tls_or_httpcore() -> None:
    # Building httpx's transport (the CA bundle, httpcore) took 66-98 ms of every command's
    # start on this machine kind.
    code = (
        "import sys\n"
        "from tracestore.client import Client\n"
        "client = Client('http://127.0.0.1:9', 'token')\n"
        "client.close()\n"
        "loaded = sorted(m for m in ('httpcore', 'certifi') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with Client("http://127.0.0.1:9", "token") as client:
        transport = client.http._transport
        assert isinstance(transport, SendfileTransport) and transport._httpx is None
