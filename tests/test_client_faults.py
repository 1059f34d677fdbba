"""Faults on the wire: an httpx transport wrapper drops connections and answers 503 on
random part PUTs (and cuts a completion's answer); the Client retries and the bytes that
land are exact."""

from __future__ import annotations

import hashlib
import os
import random
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from tracestore import errors
from tracestore.client import Client, RetryPolicy
from tracestore.server.app import create_app
from tracestore.server.services import Services
from tracestore.server.settings import MIB

FAST = RetryPolicy(attempts=8, base_delay=0.001, max_delay=0.01)
META = {"shape": {"rankCount": 4}}


class FaultyTransport(httpx.BaseTransport):
    """Wraps a transport; fails a share of the requests that ``matches`` selects."""

    KINDS: tuple[str, ...] = ("refused", "reset mid-body", "lost answer", "503")

    def __init__(self, inner: httpx.BaseTransport, rate: float, seed: int = 7) -> None:
        self.inner = inner
        self.rate = rate
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        self.match = "/blobs/parts/"
        self.method = "PUT"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != self.method or self.match not in request.url.path:
            return self.inner.handle_request(request)
        with self.lock:
            kind = None
            if self.random.random() < self.rate:
                # Round robin over the kinds, so every kind occurs in a short run.
                kind = self.KINDS[sum(self.injected.values()) % len(self.KINDS)]
                self.injected[kind] += 1
        if kind == "refused":
            raise httpx.ConnectError("connection refused (injected)", request=request)
        if kind == "reset mid-body":
            for _chunk in request.stream:  # type: ignore[union-attr]
                break
            raise httpx.WriteError("connection reset while sending (injected)", request=request)
        if kind == "503":
            for _chunk in request.stream:  # type: ignore[union-attr]
                pass
            return httpx.Response(
                503,
                json={
                    "error": {"code": "SERVICE_UNAVAILABLE", "message": "busy", "requestId": "r"}
                },
                request=request,
            )
        response = self.inner.handle_request(request)
        if kind == "lost answer":
            # The part was stored, but its answer never arrives: the client must send it again.
            response.read()
            raise httpx.ReadError(
                "connection dropped before the answer (injected)", request=request
            )
        return response


@pytest.fixture
def app_http(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services), raise_server_exceptions=False) as http:
        yield http


def faulty_client(app_http: TestClient, token: str, rate: float) -> tuple[Client, FaultyTransport]:
    transport = FaultyTransport(app_http._transport, rate)
    http = httpx.Client(transport=transport, base_url="http://testserver")
    return Client("http://testserver", token, http=http, retry=FAST), transport


@pytest.fixture
def traces(tmp_path: Path) -> dict[str, bytes]:
    files = {f"rank_{i}.bin": os.urandom(5 * MIB * (i % 3) + 1234 * i) for i in range(4)}
    for name, data in files.items():
        (tmp_path / "traces").mkdir(exist_ok=True)
        (tmp_path / "traces" / name).write_bytes(data)
    return files


def test_dropped_connections_and_503s_on_parts_are_retried(
    app_http: TestClient, admin_token: str, tmp_path: Path, traces: dict[str, bytes]
) -> None:
    client, transport = faulty_client(app_http, admin_token, rate=0.5)
    traceset = client.upload_traceset(tmp_path / "traces", workload_metadata=META, concurrency=4)

    assert set(transport.injected) == set(FaultyTransport.KINDS), transport.injected
    assert traceset.status == "ready"
    for entry in traceset.files:
        assert entry.hash == f"sha256:{hashlib.sha256(traces[entry.name]).hexdigest()}"
    out = tmp_path / "out"
    Client("http://testserver", admin_token, http=app_http).download_traceset(traceset.id, out)
    for name, data in traces.items():
        assert (out / name).read_bytes() == data


@pytest.mark.slow
def test_a_lost_completion_answer_is_retried(
    app_http: TestClient, admin_token: str, tmp_path: Path, traces: dict[str, bytes]
) -> None:
    client, transport = faulty_client(app_http, admin_token, rate=0.0)
    transport.method, transport.match = "POST", "/upload-url/complete"
    transport.KINDS = ("lost answer",)
    answers = iter([1.0, 0.0])
    transport.rate = 1.0
    original = transport.handle_request

    def once(request: httpx.Request) -> httpx.Response:
        if transport.match in request.url.path:
            transport.rate = next(answers, 0.0)
        return original(request)

    transport.handle_request = once  # type: ignore[method-assign]
    traceset = client.upload_traceset(tmp_path / "traces", workload_metadata=META)
    assert transport.injected["lost answer"] == 1
    assert traceset.status == "ready"


def test_exhausted_retries_leave_a_resumable_upload(
    app_http: TestClient, admin_token: str, tmp_path: Path, traces: dict[str, bytes]
) -> None:
    client, transport = faulty_client(app_http, admin_token, rate=1.0)
    client.retry = RetryPolicy(attempts=2, base_delay=0.001)
    with pytest.raises(errors.UploadIncomplete) as caught:
        client.upload_traceset(tmp_path / "traces", workload_metadata=META, concurrency=2)
    assert caught.value.upload_id.startswith("upload_")
    assert caught.value.cause is not None and caught.value.cause.code in (
        "NETWORK_ERROR",
        "SERVICE_UNAVAILABLE",
    )

    transport.rate = 0.0
    traceset = client.upload_traceset(tmp_path / "traces", resume_upload_id=caught.value.upload_id)
    assert traceset.id == caught.value.traceset_id
    assert {f.name: f.hash for f in traceset.files} == {
        n: f"sha256:{hashlib.sha256(d).hexdigest()}" for n, d in traces.items()
    }


def test_a_client_error_is_not_retried(app_http: TestClient, admin_token: str) -> None:
    calls = Counter[str]()

    def count(request: httpx.Request) -> None:
        calls[request.url.path] += 1

    http = httpx.Client(
        transport=app_http._transport,
        base_url="http://testserver",
        event_hooks={"request": [count]},
    )
    client = Client("http://testserver", admin_token, http=http, retry=FAST)
    with pytest.raises(errors.NotFound):
        client.get_traceset("ts_nope")
    assert calls["/api/v1/tracesets/ts_nope"] == 1


def test_an_answer_that_is_not_tracestore_json_is_a_clear_error() -> None:
    def portal(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, html="<html>Welcome to the proxy</html>")

    http = httpx.Client(transport=httpx.MockTransport(portal))
    client = Client("http://proxy.example", "t", http=http, retry=FAST)
    with pytest.raises(errors.InternalError, match=r"is proxy\.example a tracestore service"):
        client.get_traceset("ts_x")

    def bad_gateway(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="Bad Gateway")

    client.http = httpx.Client(transport=httpx.MockTransport(bad_gateway))
    with pytest.raises(errors.TracestoreError) as caught:
        client.get_traceset("ts_x")
    assert caught.value.status == 502
    assert "HTTP 502 from proxy.example: Bad Gateway" in caught.value.message
