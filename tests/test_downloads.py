"""Bytes out through the real app: download URLs (one file, ranges, the ZIP of a traceset),
resolve, validate, and the TTL reset each use gives."""

from __future__ import annotations

import hashlib
import io
import random
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.uploading import put_parts, request_upload, upload
from tests.support.waiting import wait_until
from tracestore.server import db
from tracestore.server.integrity import VerifiedBlobs
from tracestore.server.lifecycle import sweep
from tracestore.server.services import Services
from tracestore.server.settings import MIB
from tracestore.server.storage.blobs import ContentStore
from tracestore.server.storage.local import LocalBlobStore

METADATA = {"shape": {"rankCount": 2}, "workload_family": "llm"}


def _files() -> dict[str, tuple[bytes, str]]:
    rng = random.Random(11)
    return {
        "rank_0.json": (rng.randbytes(6 * MIB + 7), "primary"),  # two parts
        "ranks/deeper/rank_1.json": (rng.randbytes(1000), "primary"),
        "empty.log": (b"", "supporting"),
    }


def _api(traceset_id: str, what: str) -> str:
    return f"/api/v1/tracesets/{traceset_id}/{what}"


def _no_token(http: TestClient, url: str, **headers: str) -> Any:
    """GET a presigned URL the way a browser or curl would: no bearer token."""
    return http.get(url, headers={"Authorization": "", **headers})


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_download_one_file_by_presigned_url_with_ranges_etag_and_sha256(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    files = _files()
    ts = upload(http, files, METADATA)
    answer = http.get(_api(ts["id"], "download"), params={"file": "rank_0.json"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"url", "expiresAt", "file", "ranks", "wholeFiles"}
    assert body["wholeFiles"] == []  # a ranks download's files that come whole
    assert body["file"] == "rank_0.json" and body["ranks"] is None
    assert body["expiresAt"].endswith("Z")
    data = files["rank_0.json"][0]

    whole = _no_token(http, body["url"])
    assert whole.status_code == 200
    assert whole.content == data
    assert whole.headers["content-length"] == str(len(data))
    assert whole.headers["etag"] == f'"{_sha(data)}"'
    assert whole.headers["x-amz-meta-sha256"] == _sha(data)
    assert whole.headers["accept-ranges"] == "bytes"
    assert "rank_0.json" in whole.headers["content-disposition"]

    # A client resuming a partial file asks for the rest with a range request.
    part = _no_token(http, body["url"], Range="bytes=5242880-")
    assert part.status_code == 206
    assert part.content == data[5242880:]
    assert part.headers["content-range"] == f"bytes 5242880-{len(data) - 1}/{len(data)}"
    middle = _no_token(http, body["url"], Range="bytes=100-199")
    assert middle.status_code == 206 and middle.content == data[100:200]
    beyond = _no_token(http, body["url"], Range=f"bytes={len(data) + 10}-")
    assert beyond.status_code == 416

    # The URL expires after the setting (15 minutes by default).
    clock.advance(minutes=16)
    late = _no_token(http, body["url"])
    assert_error(late, 403, "FORBIDDEN")


def test_download_refusals_name_what_is_wrong(http: TestClient, services: Services) -> None:
    ts = upload(http, _files(), METADATA)
    missing = http.get(_api(ts["id"], "download"), params={"file": "nope.json"})
    assert assert_error(missing, 404, "NOT_FOUND")["message"] == (
        f"File 'nope.json' not found in traceset '{ts['id']}'"
    )
    unknown = http.get(_api("ts_doesnotexist", "download"))
    assert (
        assert_error(unknown, 404, "NOT_FOUND")["message"] == "Traceset 'ts_doesnotexist' not found"
    )
    no_token = http.get(_api(ts["id"], "download"), headers={"Authorization": ""})
    assert no_token.status_code == 401

    uploading = request_upload(http, {"a.log": (b"abc", "supporting")}).json()
    for what, method in (("download", "GET"), ("resolve", "GET"), ("validate", "POST")):
        refused = http.request(method, _api(uploading["tracesetId"], what))
        assert (
            "is uploading; only a ready traceset can be"
            in assert_error(refused, 409, "CONFLICT")["message"]
        )


def test_tampered_or_expired_archive_url_is_forbidden(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    ts = upload(http, _files(), METADATA)
    url = http.get(_api(ts["id"], "download")).json()["url"]
    parsed = urlparse(url)
    query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
    other = upload(http, {"x.log": (b"x", "supporting")})
    forged = f"/blobs/archive/{other['id']}?{urlencode(query)}"
    assert _no_token(http, forged).status_code == 403
    query["expires"] = str(int(query["expires"]) + 3600)
    assert _no_token(http, f"{parsed.path}?{urlencode(query)}").status_code == 403
    clock.advance(minutes=15)
    expired = _no_token(http, url)
    assert (
        assert_error(expired, 403, "FORBIDDEN")["message"]
        == "The URL has expired; request a new URL"
    )


def test_archive_of_a_traceset_unpacks_to_identical_bytes(
    http: TestClient, services: Services
) -> None:
    files = _files()
    files["a/b/c/d/deep.bin"] = (bytes(range(256)) * 300, "supporting")
    ts = upload(http, files, METADATA, name="my run: 2 ranks")
    answer = http.get(_api(ts["id"], "download")).json()
    assert answer["file"] is None
    assert urlparse(answer["url"]).path == f"/blobs/archive/{ts['id']}"

    response = _no_token(http, answer["url"])
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/zip"
    assert int(response.headers["content-length"]) == len(response.content)
    assert "my_run_2_ranks.zip" in response.headers["content-disposition"]
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    assert archive.testzip() is None
    assert archive.namelist() == list(files)
    for name, (data, _role) in files.items():
        assert archive.read(name) == data
        assert archive.getinfo(name).compress_type == zipfile.ZIP_STORED
    # The same traceset gives the same archive bytes every time.
    assert _no_token(http, answer["url"]).content == response.content


def test_download_and_resolve_reset_the_ttl_and_expired_ones_answer_410(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    ts = upload(http, {"a.log": (b"abc", "supporting")}, ttlDays=7)
    created = clock()
    assert ts["expiresAt"] == _stamp(created + timedelta(days=7))

    clock.advance(days=5)
    assert http.get(_api(ts["id"], "download"), params={"file": "a.log"}).status_code == 200
    assert http.get(f"/api/v1/tracesets/{ts['id']}").json()["expiresAt"] == _stamp(
        clock() + timedelta(days=7)
    )
    clock.advance(days=6)  # 11 days after creation: alive only because of the download
    assert http.get(_api(ts["id"], "resolve")).status_code == 200
    assert http.get(f"/api/v1/tracesets/{ts['id']}").json()["expiresAt"] == _stamp(
        clock() + timedelta(days=7)
    )
    assert sweep(services).expired_tracesets == 0

    clock.advance(days=7)
    gone = http.get(_api(ts["id"], "download"))
    assert assert_error(gone, 410, "GONE")["message"].startswith(
        f"Traceset '{ts['id']}' expired at "
    )
    assert sweep(services).expired_tracesets == 1
    after = http.get(f"/api/v1/tracesets/{ts['id']}").json()
    assert after["status"] == "deleted"
    assert http.get(_api(ts["id"], "download")).status_code == 409


def test_promoted_traceset_never_expires_and_use_keeps_it_so(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    ts = upload(http, {"a.log": (b"abc", "supporting")}, {"workload_family": "llm"})
    clock.advance(days=6)
    promoted = http.post(_api(ts["id"], "promote"), json={"target": "tenant"})
    assert promoted.status_code == 200, promoted.text
    assert http.get(f"/api/v1/tracesets/{ts['id']}").json()["expiresAt"] is None
    clock.advance(days=400)
    assert http.get(_api(ts["id"], "download")).status_code == 200
    assert http.get(_api(ts["id"], "resolve")).status_code == 200
    assert sweep(services).expired_tracesets == 0
    after = http.get(f"/api/v1/tracesets/{ts['id']}").json()
    assert after["status"] == "ready" and after["expiresAt"] is None


def test_resolve_answers_the_spec_shape_and_real_locations(
    http: TestClient, services: Services
) -> None:
    files = _files()
    ts = upload(http, files, METADATA, name="resolve me")
    answer = http.get(_api(ts["id"], "resolve"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert list(body) == ["traceset_id", "name", "layout", "files", "total_size"]
    assert body["traceset_id"] == ts["id"] and body["name"] == "resolve me"
    assert body["layout"] == "cas"
    assert body["total_size"] == sum(len(d) for d, _ in files.values())
    store = services.store
    assert isinstance(store, LocalBlobStore)
    for entry, (name, (data, role)) in zip(body["files"], files.items(), strict=True):
        assert list(entry) == ["name", "role", "size", "key", "uri"]
        assert (entry["name"], entry["role"], entry["size"]) == (name, role, len(data))
        assert entry["key"].endswith(_sha(data))
        assert entry["uri"].startswith("file://")
        assert Path(urlparse(entry["uri"]).path).read_bytes() == data
        assert (store.root / entry["key"]).read_bytes() == data


def test_validate_passes_then_catches_corrupt_and_missing_blobs(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    files = _files()
    ts = upload(http, files, METADATA)
    report = http.post(_api(ts["id"], "validate"))
    assert report.status_code == 200, report.text
    checks = {c["name"]: c for c in report.json()["checks"]}
    assert list(checks) == [
        "file_integrity",
        "metadata_complete",
        "rank_census",
        "parallelism_consistency",
        "process_groups",
        "stragglers",
    ]
    readiness = report.json()["readiness"]
    assert [r["name"] for r in readiness] == [
        "hta_ready",
        "chakra_ready",
        "astra_ready",
        "perfetto_ready",
    ]
    assert all(set(c) == {"name", "passed", "message", "warning"} for c in checks.values())
    assert checks["file_integrity"] == {
        "name": "file_integrity",
        "passed": True,
        "message": "3 files present; sizes and SHA-256 re-verified (6292463 bytes)",
        "warning": False,
    }
    assert checks["metadata_complete"]["passed"] is True

    # Without inspection's findings the census checks say so, and do not fail the traceset.
    with services.db.session() as session:
        session.execute(
            update(db.Traceset).where(db.Traceset.id == ts["id"]).values(inspection=None)
        )
    body = http.post(_api(ts["id"], "validate")).json()
    assert body["valid"] is True
    for check in body["checks"][2:5]:
        assert check["passed"] is None
        assert check["message"].startswith("Not evaluated yet")
    assert [r["ready"] for r in body["readiness"]] == [None] * 4

    store = services.store
    assert isinstance(store, LocalBlobStore)
    deep = store.root / store.blob_key(_sha(files["ranks/deeper/rank_1.json"][0]))
    deep.write_bytes(b"x" * 1000)  # same size, other bytes
    clock.advance(seconds=services.settings.reverify_interval.total_seconds())
    body = http.post(_api(ts["id"], "validate")).json()
    assert body["valid"] is False
    integrity = body["checks"][0]
    assert integrity["passed"] is False
    assert "'ranks/deeper/rank_1.json': its bytes hash to sha256:" in integrity["message"]
    deep.unlink()
    integrity = http.post(_api(ts["id"], "validate")).json()["checks"][0]
    assert integrity["passed"] is False
    assert "'ranks/deeper/rank_1.json': its blob sha256:" in integrity["message"]
    assert "is missing" in integrity["message"]


def test_validate_metadata_complete_fails_without_a_rank_count(
    http: TestClient, services: Services
) -> None:
    ts = upload(http, _files(), METADATA)
    with services.db.session() as session:
        session.execute(
            update(db.Traceset).where(db.Traceset.id == ts["id"]).values(rank_count=None)
        )
    body = http.post(_api(ts["id"], "validate")).json()
    check = body["checks"][1]
    assert check == {
        "name": "metadata_complete",
        "passed": False,
        "message": "2 primary files but no rank count declared in workloadMetadata",
        "warning": False,
    }
    assert body["valid"] is False
    supporting = upload(http, {"notes.txt": (b"hi", "supporting")})
    assert http.post(_api(supporting["id"], "validate")).json()["valid"] is True


def test_a_traceset_of_shared_bytes_downloads_whole_while_parts_upload(
    http: TestClient, services: Services
) -> None:
    """Download is refused only for the traceset being uploaded, not for others sharing
    its bytes."""
    files = {"same.bin": (b"shared" * 1000, "supporting")}
    first = upload(http, files)
    started = request_upload(http, files).json()
    put_parts(http, started, files)
    url = http.get(_api(first["id"], "download"), params={"file": "same.bin"}).json()["url"]
    assert _no_token(http, url).content == files["same.bin"][0]


def _stamp(moment: Any) -> str:
    return str(moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"))


def _counting_reads(services: Services, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The blobs the store opens from now on, in order (the real store still reads them)."""
    opened: list[str] = []
    store = services.store
    real_open = store.open_blob

    def open_blob(sha256: str) -> BinaryIO:
        opened.append(sha256)
        return real_open(sha256)

    monkeypatch.setattr(store, "open_blob", open_blob)
    return opened


def test_validates_of_one_traceset_rehash_its_bytes_once_per_interval(
    http: TestClient, services: Services, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """48 readers looping validate re-hashed 45 GiB in 30 s (issue 41): within the
    interval a blob is read whole once, however many validate it, at once or in turn."""
    files = _files()
    ts = upload(http, files, METADATA)
    blobs = {_sha(data) for data, _ in files.values()}
    opened = _counting_reads(services, monkeypatch)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: http.post(_api(ts["id"], "validate")), range(16)))
    assert [a.status_code for a in answers] == [200] * 16
    assert all(a.json()["checks"][0]["passed"] for a in answers)
    assert sorted(opened) == sorted(blobs)  # each once
    clock.advance(seconds=services.settings.reverify_interval.total_seconds() - 1)
    integrity = http.post(_api(ts["id"], "validate")).json()["checks"][0]
    assert integrity["passed"] is True
    assert "bytes last read whole at" in integrity["message"]
    assert sorted(opened) == sorted(blobs)

    # Changed in place, the bytes are caught once the interval allows a new read.
    store = services.store
    assert isinstance(store, LocalBlobStore)
    deep = store.root / store.blob_key(_sha(files["ranks/deeper/rank_1.json"][0]))
    deep.write_bytes(b"x" * 1000)
    clock.advance(seconds=1)
    integrity = http.post(_api(ts["id"], "validate")).json()["checks"][0]
    assert integrity["passed"] is False
    assert "'ranks/deeper/rank_1.json': its bytes hash to sha256:" in integrity["message"]
    assert len(opened) == 2 * len(blobs)
    # A problem is looked at afresh each time (a restored blob is seen at once).
    http.post(_api(ts["id"], "validate"))
    assert len(opened) == 2 * len(blobs) + 1


def test_a_blob_removed_within_the_interval_is_missing_at_once(
    http: TestClient, services: Services
) -> None:
    files = _files()
    ts = upload(http, files, METADATA)
    assert http.post(_api(ts["id"], "validate")).json()["checks"][0]["passed"] is True
    store = services.store
    assert isinstance(store, LocalBlobStore)
    (store.root / store.blob_key(_sha(files["ranks/deeper/rank_1.json"][0]))).unlink()
    integrity = http.post(_api(ts["id"], "validate")).json()["checks"][0]
    assert integrity["passed"] is False
    assert "'ranks/deeper/rank_1.json': its blob sha256:" in integrity["message"]


def test_a_zero_interval_rehashes_at_every_validate(
    http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services.settings, "reverify_interval", timedelta(0))
    files = _files()
    ts = upload(http, files, METADATA)
    opened = _counting_reads(services, monkeypatch)
    for _ in range(3):
        assert http.post(_api(ts["id"], "validate")).json()["checks"][0]["passed"] is True
    assert len(opened) == 3 * len(files)


def test_validates_of_a_blob_being_read_wait_for_that_read(
    services: Services, clock: FakeClock
) -> None:
    """Concurrent asks share the read in flight, even with no interval at all."""
    data = b"shared bytes" * 1000
    sha256 = _sha(data)
    reads: list[str] = []
    entered, release = threading.Event(), threading.Event()

    class SlowStore:
        def open_blob(self, asked: str) -> BinaryIO:
            reads.append(asked)
            entered.set()
            assert release.wait(30)
            return io.BytesIO(data)

        def blob_exists(self, asked: str) -> bool:
            return True

    class DecidingLock:
        """VerifiedBlobs' lock, counting the askers who decided (a read or a wait)."""

        def __init__(self) -> None:
            self.lock, self.decided = threading.Lock(), 0

        def __enter__(self) -> None:
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            self.decided += 1
            self.lock.release()

    store = cast(ContentStore, SlowStore())
    verified = VerifiedBlobs()
    deciding = DecidingLock()
    verified._lock = deciding  # type: ignore[assignment]
    with ThreadPoolExecutor(6) as pool:
        first = pool.submit(verified.outcome, store, sha256, clock(), timedelta(0))
        assert entered.wait(30)
        others = [
            pool.submit(verified.outcome, store, sha256, clock(), timedelta(0)) for _ in range(5)
        ]
        # Every asker decided while the read ran (a loaded machine may start a thread only
        # after the read has ended, and with no interval, that one reads again).
        wait_until(lambda: deciding.decided >= 6, "the askers never asked", timeout=30)
        release.set()
        outcomes = [first.result(30), *(o.result(30) for o in others)]
    assert {size for size, _ in outcomes} == {len(data)}
    assert reads == [sha256]
