"""The whole upload → complete → download flow through the real app with its bytes in S3
(moto's S3-protocol server, ``TRACESTORE_BLOB_URL=s3://bucket/prefix``): part and download
URLs are real S3 presigned URLs, so no byte passes through the service."""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.ports import free_port
from tests.support.s3server import MotoServer, with_s3_bytes
from tests.support.uploading import (
    complete,
    complete_in_a_process_that_dies,
    put_parts,
    request_upload,
)
from tests.support.waiting import wait_until
from tracestore.client import Client
from tracestore.server.app import create_app
from tracestore.server.services import Services
from tracestore.server.settings import MIB, Settings
from tracestore.server.storage.s3 import S3BlobStore

pytestmark = pytest.mark.slow  # a moto server and the service over S3


@pytest.fixture
def settings(
    settings: Settings, s3_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    return with_s3_bytes(settings, s3_server, monkeypatch)


@pytest.fixture
def s3http() -> Iterator[httpx.Client]:
    """A plain HTTP client for the presigned URLs (no bearer token, no proxy)."""
    with httpx.Client(trust_env=False, timeout=60) as client:
        yield client


def _store(services: Services) -> S3BlobStore:
    assert isinstance(services.store, S3BlobStore)
    return services.store


def _keys(store: S3BlobStore, area: str) -> list[str]:
    prefix = f"{store.prefix}/{area}/"
    objects = store.client.list_objects_v2(Bucket=store.bucket, Prefix=prefix)
    open_uploads = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=prefix)
    return [o["Key"] for o in objects.get("Contents", [])] + [
        u["Key"] for u in open_uploads.get("Uploads", [])
    ]


def _files() -> dict[str, tuple[bytes, str]]:
    return {
        "rank_0.et": (random.Random(5).randbytes(5 * MIB + 4321), "primary"),  # two parts
        "rank_1.et": (b"", "primary"),
        "config/run.yaml": (b"lr: 1e-4\n", "supporting"),
        "copies/run.yaml": (b"lr: 1e-4\n", "supporting"),
    }


def test_upload_complete_download_resolve_and_validate_through_s3(
    http: TestClient, services: Services, s3_server: MotoServer, s3http: httpx.Client
) -> None:
    assert http.get("/readyz").json()["checks"]["blobStore"] == "ok"
    files = _files()
    started = request_upload(http, files, {"shape": {"rankCount": 3}})
    assert started.status_code == 200, started.text
    answer = started.json()
    urls = [p["url"] for f in answer["files"] for p in f["parts"]]
    assert len(urls) == 5 and all(u.startswith(s3_server.endpoint_url + "/") for u in urls)

    etags = put_parts(s3http, answer, files)
    resumed = http.get(f"/api/v1/tracesets/upload-url/{answer['uploadId']}").json()
    assert all(f["parts"] == [] for f in resumed["files"])
    received = {f["name"]: [p["size"] for p in f["receivedParts"]] for f in resumed["files"]}
    assert received["rank_0.et"] == [5 * MIB, 4321] and received["rank_1.et"] == [0]

    done = complete(http, answer["uploadId"], etags)
    assert done.status_code == 201, done.text
    again = complete(http, answer["uploadId"], etags)
    assert again.status_code == 200 and again.json() == done.json()

    traceset = http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()
    assert traceset["status"] == "ready"
    for entry in traceset["files"]:
        data = files[entry["name"]][0]
        assert entry["hash"] == "sha256:" + hashlib.sha256(data).hexdigest()
        grant = http.get(
            f"/api/v1/tracesets/{answer['tracesetId']}/download", params={"file": entry["name"]}
        )
        assert grant.status_code == 200, grant.text
        assert grant.json()["url"].startswith(s3_server.endpoint_url + "/")
        fetched = s3http.get(grant.json()["url"])
        assert fetched.status_code == 200 and fetched.content == data

    store = _store(services)
    assert len(_keys(store, "blobs")) == 3  # the two equal files share one blob
    services.wait_for_background()  # staged parts are removed in the background
    assert _keys(store, "staging") == []
    resolved = http.get(f"/api/v1/tracesets/{answer['tracesetId']}/resolve").json()
    assert {f["uri"] for f in resolved["files"]} == {
        f"s3://{store.bucket}/{key}" for key in _keys(store, "blobs")
    }
    checks = http.post(f"/api/v1/tracesets/{answer['tracesetId']}/validate").json()["checks"]
    assert {c["name"]: c["passed"] for c in checks}["file_integrity"] is True


def test_with_the_bytes_in_s3_the_embedded_store_routes_are_not_mounted(
    http: TestClient,
) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    assert "/blobs/archive/{traceset_id}" in paths  # the archive streams through the service
    assert not [p for p in paths if p.startswith(("/blobs/parts/", "/blobs/content/"))]
    query = "size=1&partSize=1&expires=9999999999&signature=x"
    for method, path in (
        ("PUT", f"/blobs/parts/upload_x/0/1?{query}"),
        ("GET", "/blobs/content/x"),
    ):
        response = http.request(method, path, content=b"x" if method == "PUT" else None)
        assert_error(response, 404, "NOT_FOUND")


def test_an_oversize_part_fails_the_session_and_leaves_no_bytes(
    http: TestClient, services: Services, s3http: httpx.Client
) -> None:
    files = {"rank_0.et": (b"x" * 100, "primary")}
    answer = request_upload(http, files, {"shape": {"rankCount": 1}}).json()
    url = answer["files"][0]["parts"][0]["url"]
    # Real S3 refuses this PUT (the Content-Length is signed); moto takes it.
    sent = s3http.put(url, content=b"x" * 150)
    if sent.status_code != 200:
        pytest.skip("the store refused the oversize part itself")
    done = complete(
        http, answer["uploadId"], {"rank_0.et": [{"partNumber": 1, "etag": sent.headers["etag"]}]}
    )
    assert (
        "larger than its declared size of 100 bytes"
        in assert_error(done, 413, "PAYLOAD_TOO_LARGE")["message"]
    )
    traceset = http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()
    assert traceset["status"] == "upload_failed"
    store = _store(services)
    assert _keys(store, "staging") == [] and _keys(store, "blobs") == []


def test_a_completion_killed_after_s3_assembled_the_file_is_finished_by_a_retry(
    http: TestClient,
    services: Services,
    clock: FakeClock,
    s3http: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = {"a.et": (b"a" * 100, "primary"), "b.et": (b"b" * 200, "primary")}
    answer = request_upload(http, files, {"shape": {"rankCount": 2}}).json()
    etags = put_parts(s3http, answer, files)
    store = _store(services)
    original = store._hash_object
    calls = 0

    def dies_on_the_second_file(*args: Any) -> str:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise SystemExit("killed")  # after S3 completed b.et's multipart upload
        return original(*args)

    monkeypatch.setattr(store, "_hash_object", dies_on_the_second_file)
    complete_in_a_process_that_dies(http, services, answer["uploadId"], etags, monkeypatch)
    monkeypatch.setattr(store, "_hash_object", original)
    assert http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()["status"] == "uploading"
    clock.advance(seconds=61)  # the dead completion's lease runs out
    done = complete(http, answer["uploadId"], etags)
    assert done.status_code == 201, done.text
    for entry in done.json()["files"]:
        assert entry["hash"] == "sha256:" + hashlib.sha256(files[entry["name"]][0]).hexdigest()
    services.wait_for_background()
    assert _keys(store, "staging") == []


@contextmanager
def serving(services: Services) -> Iterator[str]:
    """The real app under uvicorn on a free 127.0.0.1 port, in a thread; its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(services=services), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def started() -> bool:
        assert thread.is_alive(), "uvicorn stopped"
        return bool(server.started)

    wait_until(started, "uvicorn did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_the_python_client_uploads_to_and_downloads_from_s3_over_real_http(
    services: Services, admin_token: str, tmp_path: Path
) -> None:
    source = tmp_path / "run"
    files = {
        "rank_0.et": random.Random(9).randbytes(5 * MIB + 777),
        "rank_1.et": b"",
        "logs/train.log": b"step 1\n",
    }
    for name, data in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(data)
    with serving(services) as base_url, Client(base_url, admin_token) as client:
        traceset = client.upload_traceset(source, workload_metadata={"shape": {"rankCount": 3}})
        assert traceset.status == "ready"
        written = client.download_traceset(traceset.id, tmp_path / "back")
    back = {p.relative_to(tmp_path / "back").as_posix(): p.read_bytes() for p in written}
    assert back == files


def test_the_page_may_send_parts_to_the_bucket_by_default(
    http: TestClient, services: Services, s3_server: MotoServer
) -> None:
    """Issue 43, item 1: the page's policy lets it PUT parts where the part URLs point (the
    bucket's origin, path-style on an S3-compatible endpoint) with nothing configured."""
    assert services.part_origin == s3_server.endpoint_url
    started = request_upload(http, {"a.log": (b"abc", "supporting")}, None)
    url = started.json()["files"][0]["parts"][0]["url"]
    assert url.startswith(services.part_origin + "/")
    policy = http.get("/upload").headers["content-security-policy"]
    assert f"connect-src 'self' {s3_server.endpoint_url};" in policy


def test_the_bucket_origin_without_credentials_is_the_endpoints(
    s3_server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Signing needs credentials: without them the page still gets an answer (the endpoint's
    origin), and readiness, not the page, says what is missing."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = S3BlobStore.from_url("s3://bucket/prefix", endpoint_url=s3_server.endpoint_url)
    assert store.part_origin() == s3_server.endpoint_url
