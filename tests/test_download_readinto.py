"""Downloads through the client's own transport (tracestore/client/sendfile.py): a GET's body
read from the socket into one reused buffer and handed to ``transfers.BodySink``, against a
small real HTTP server that can misbehave on cue (drop mid-body, ignore a Range, answer 403
or 503, send more than it should). Downloads through httpx's own path are the ones
tests/test_downloads.py and tests/test_client_faults.py drive."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest

from tests.support.httpserver import serving
from tracestore.client.retries import RetryPolicy
from tracestore.client.sendfile import SendfileTransport
from tracestore.client.transfers import BODY_SINK, Stopped, download_to
from tracestore.errors import IntegrityError, TracestoreError

MIB = 1024 * 1024


@dataclass
class Blob:
    """The bytes the server answers, what it does with each GET in turn (then ``ok``), and
    the Range headers it saw."""

    data: bytes
    steps: list[str] = field(default_factory=list)
    ranges: list[str | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self) -> str:
        with self.lock:
            return self.steps.pop(0) if self.steps else "ok"


def handler_for(blob: Blob) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            step = blob.next()
            asked = self.headers.get("Range")
            blob.ranges.append(asked)
            blob.paths.append(self.path)
            if step in ("403", "503"):
                body = b'{"error": {"code": "FORBIDDEN", "message": "The URL has expired"}}'
                self._head(int(step), len(body))
                self.wfile.write(body)
                return
            start = 0
            if asked and step != "ignore-range":
                start = int(asked.removeprefix("bytes=").rstrip("-"))
            data = blob.data[start:] + (b"extra" if step == "too-long" else b"")
            self._head(206 if start else 200, len(data))
            if step == "drop":
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(data)

        def _head(self, status: int, length: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(length))
            self.end_headers()

    return Handler


@pytest.fixture
def blob() -> Blob:
    return Blob(os.urandom(3 * MIB + 17))


@pytest.fixture
def url(blob: Blob) -> Iterator[str]:
    with serving(handler_for(blob)) as base:
        yield f"{base}/blobs/content/x"


@pytest.fixture
def received() -> list[object]:
    """What each response said of its body: True when the transport handed it to the sink."""
    return []


@pytest.fixture
def http(received: list[object]) -> Iterator[httpx.Client]:
    def note(response: httpx.Response) -> None:
        received.append(response.extensions.get(BODY_SINK))

    with httpx.Client(
        timeout=30, transport=SendfileTransport(), event_hooks={"response": [note]}
    ) as client:
        yield client


def fetch(
    http: httpx.Client,
    url: str,
    destination: Path,
    blob: Blob,
    *,
    stop: threading.Event | None = None,
    urls: list[str] | None = None,
) -> Path:
    def next_url() -> str:
        return urls.pop(0) if urls else url

    return download_to(
        http,
        next_url,
        destination,
        size=len(blob.data),
        sha256=hashlib.sha256(blob.data).hexdigest(),
        retry=RetryPolicy(attempts=3, base_delay=0.01),
        stop=stop,
    )


def test_a_body_goes_to_the_sink_hashed_and_whole(
    http: httpx.Client, url: str, blob: Blob, received: list[object], tmp_path: Path
) -> None:
    path = fetch(http, url, tmp_path / "rank0.json", blob)
    assert path.read_bytes() == blob.data
    assert received == [True]  # the transport's readinto path, not httpx's chunks
    assert not (tmp_path / "rank0.json.partial").exists()
    # The connection is kept alive: a second download goes over it.
    fetch(http, url, tmp_path / "again.json", blob)
    assert received == [True, True]


def test_a_body_cut_off_mid_way_is_resumed_with_a_range(
    http: httpx.Client, url: str, blob: Blob, received: list[object], tmp_path: Path
) -> None:
    blob.steps = ["drop"]
    path = fetch(http, url, tmp_path / "rank0.json", blob)
    assert path.read_bytes() == blob.data
    half = len(blob.data) // 2
    assert blob.ranges == [None, f"bytes={half}-"]


def test_a_server_that_ignores_the_range_is_read_from_the_start(
    http: httpx.Client, url: str, blob: Blob, tmp_path: Path
) -> None:
    blob.steps = ["drop", "ignore-range"]
    assert fetch(http, url, tmp_path / "rank0.json", blob).read_bytes() == blob.data


def test_a_403_asks_for_a_fresh_url_and_a_503_is_retried(
    http: httpx.Client, url: str, blob: Blob, received: list[object], tmp_path: Path
) -> None:
    blob.steps = ["403", "503"]
    fresh = [url + "?first", url + "?fresh"]
    path = fetch(http, url, tmp_path / "rank0.json", blob, urls=fresh)
    assert path.read_bytes() == blob.data
    assert blob.paths == [f"/blobs/content/x?{q}" for q in ("first", "fresh", "fresh")]
    assert received == [False, False, True]


def test_an_error_answer_is_the_api_error(
    http: httpx.Client, url: str, blob: Blob, tmp_path: Path
) -> None:
    blob.steps = ["403"] * 3
    with pytest.raises(TracestoreError, match="The URL has expired"):
        fetch(http, url, tmp_path / "rank0.json", blob)


def test_more_bytes_than_recorded_is_an_integrity_error(
    http: httpx.Client, url: str, blob: Blob, tmp_path: Path
) -> None:
    blob.steps = ["too-long"]
    with pytest.raises(IntegrityError, match="larger than"):
        fetch(http, url, tmp_path / "rank0.json", blob)
    assert not (tmp_path / "rank0.json").exists()


def test_a_stop_ends_the_download_and_keeps_the_partial_file(
    http: httpx.Client, url: str, blob: Blob, tmp_path: Path
) -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped):
        fetch(http, url, tmp_path / "rank0.json", blob, stop=stop)
    assert (tmp_path / "rank0.json.partial").exists()
    assert not (tmp_path / "rank0.json").exists()
    # The next call resumes from it.
    assert fetch(http, url, tmp_path / "rank0.json", blob).read_bytes() == blob.data
