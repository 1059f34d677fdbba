"""The API's calls over ``http://`` on the client's own connections
(tracestore/client/sendfile.py ``SendfileTransport._exchange``), against a small real HTTP
server: bodies sent whole, answers read as httpx reads them (length-delimited, chunked,
gzip, none), connections kept only when an answer was read to its end, failures as httpx's
errors, and httpx's own transport (its CA bundle, httpcore) built only for a request that
needs it."""

from __future__ import annotations

import gc
import gzip
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from tests.support.httpserver import serving
from tracestore.client import Client
from tracestore.client.sendfile import SendfileTransport


@dataclass
class Seen:
    """What the server saw: each request's method, path, body, and the connection it came on."""

    requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    connections: list[tuple[str, int]] = field(default_factory=list)
    # Set by a test once it has the first line of /trickle; its handler then sends the rest.
    released: threading.Event = field(default_factory=threading.Event)
    released_in_time: list[bool] = field(default_factory=list)


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
            if self.path == "/refuse":
                # Refused on its headers: answered and closed with the body unread (as a
                # proxy's body limit does), which resets the connection under the sender.
                self.close_connection = True
                self._answer(413, b'{"error": {"code": "PAYLOAD_TOO_LARGE"}}', close=True)
                return
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
            elif self.path == "/trickle":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"6\r\nfirst\n\r\n")
                self.wfile.flush()
                seen.released_in_time.append(seen.released.wait(5))
                self.wfile.write(b"5\r\nlast\n\r\n0\r\n\r\n")
            elif self.path == "/closing-big":
                self.close_connection = True
                self._answer(200, b"z" * (4 * 1024 * 1024), close=True)
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


def test_a_slowly_streamed_answer_is_handed_on_as_it_comes(
    served: tuple[str, Seen], transport: SendfileTransport
) -> None:
    # The answer's second chunk is sent only once the test has its first line: a transport
    # that waited to fill a 64 KiB read would have it only when the server gave up waiting.
    url, seen = served
    with httpx.Client(transport=transport, timeout=10) as http:
        with http.stream("GET", f"{url}/trickle") as response:
            lines = response.iter_lines()
            assert next(lines) == "first"
            seen.released.set()
            assert list(lines) == ["last"]
        assert http.get(f"{url}/chunked").json() == {"a": 1}
    assert seen.released_in_time == [True]
    assert len(set(seen.connections)) == 1, "read to its end, the connection was kept"


def test_an_idle_connection_is_not_reused_after_keepalive_expiry(served: tuple[str, Seen]) -> None:
    # As httpx's pool: a balancer or NAT may drop (or close just then) a connection idle
    # for longer, and a POST sent on it is not retried.
    url, seen = served
    # An expiry of seconds: requests back to back must come within it on a loaded machine.
    transport = SendfileTransport(limits=httpx.Limits(keepalive_expiry=3.0))
    with httpx.Client(transport=transport, timeout=10) as http:
        for pause in (0, 0, 4.0, 0):
            time.sleep(pause)
            assert http.post(f"{url}/run", json=[pause]).json() == {"echo": [pause]}
    first, second, third, fourth = seen.connections
    assert first == second and third != second and fourth == third


def test_an_answer_given_before_the_body_was_taken_is_the_answer(
    served: tuple[str, Seen], transport: SendfileTransport
) -> None:
    # As httpx does: the refusal, not the reset the sender gets while the body goes out.
    url, _ = served
    body = b"[" + b"1," * (16 * 1024 * 1024) + b"1]"
    with httpx.Client(transport=transport, timeout=10) as http:
        response = http.post(f"{url}/refuse", content=body)
        assert (response.status_code, response.json()) == (
            413,
            {"error": {"code": "PAYLOAD_TOO_LARGE"}},
        )
        assert http.get(f"{url}/chunked").json() == {"a": 1}


@pytest.mark.slow
def test_an_answer_abandoned_on_a_closing_connection_closes_its_socket(
    served: tuple[str, Seen], transport: SendfileTransport
) -> None:
    # The server said it closes, so http.client handed the socket to the answer alone:
    # closing the response must close it, not leave it to the garbage collector.
    url, _ = served
    port = int(url.rsplit(":", 1)[1])
    with httpx.Client(transport=transport, timeout=10) as http:
        with http.stream("GET", f"{url}/closing-big") as response:
            assert next(response.iter_raw(1024)).startswith(b"z")
        open_to_server = [s for s in gc.get_objects() if _peer_port(s) == port]
        assert open_to_server == [], "the abandoned answer's socket is still open"
        assert response.is_closed


def _peer_port(thing: object) -> int | None:
    """The port a connected socket talks to (the server's, for a client's socket)."""
    if not isinstance(thing, socket.socket) or thing.fileno() == -1:
        return None
    if thing.family not in (socket.AF_INET, socket.AF_INET6):  # (a Unix socket's peer: a path)
        return None
    try:
        return int(thing.getpeername()[1])
    except OSError:  # listening, or not connected
        return None


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
