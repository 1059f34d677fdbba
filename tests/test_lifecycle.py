"""Time passing, with a fake clock: expiry, failed sessions, blob purge after the grace
period, shared bytes surviving, two sweepers at once, the timer in the server, `gc`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.s3server import MotoServer, with_s3_bytes
from tests.support.uploading import UPLOAD_URL, complete, put_parts, request_upload, upload
from tests.support.waiting import wait_until
from tracestore.cli import main
from tracestore.server import db
from tracestore.server.app import create_app
from tracestore.server.auth import ADMIN_TOKEN_FILE, bootstrap
from tracestore.server.ids import created_at, new_id
from tracestore.server.lifecycle import ORPHAN_GRACE, SweepReport, sweep
from tracestore.server.services import Services, build_services
from tracestore.server.settings import Settings
from tracestore.server.storage.local import LocalBlobStore
from tracestore.server.storage.s3 import S3BlobStore


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _blob_path(services: Services, data: bytes) -> Path:
    store = services.store
    assert isinstance(store, LocalBlobStore)
    return store.root / store.blob_key(_sha(data))


def _blob_row(services: Services, data: bytes) -> db.Blob | None:
    with services.db.session(write=False) as session:
        return session.get(db.Blob, _sha(data))


def _status(http: TestClient, traceset_id: str) -> str:
    return str(http.get(f"/api/v1/tracesets/{traceset_id}").json()["status"])


def _download(http: TestClient, traceset_id: str, name: str) -> bytes:
    answer = http.get(f"/api/v1/tracesets/{traceset_id}/download", params={"file": name})
    assert answer.status_code == 200, answer.text
    response = http.get(str(answer.json()["url"]), headers={"Authorization": ""})
    assert response.status_code == 200
    return bytes(response.content)


def test_expired_traceset_is_soft_deleted_and_its_bytes_purged_after_the_grace(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    data = b"bytes only this traceset holds" * 100
    ts = upload(http, {"a.bin": (data, "supporting")}, ttlDays=7)
    # The completion's own removal of its staged bytes, or the sweep below would find them.
    services.wait_for_background()
    clock.advance(days=6, hours=23)
    assert sweep(services) == SweepReport()
    clock.advance(hours=1)
    assert sweep(services).expired_tracesets == 1
    assert _status(http, ts["id"]) == "deleted"
    row = _blob_row(services, data)
    assert row is not None and row.unreferenced_since == clock()
    assert _blob_path(services, data).exists()

    clock.advance(hours=23, minutes=59)  # grace is 24 h
    assert sweep(services).purged_blobs == 0
    assert _blob_path(services, data).exists()
    clock.advance(minutes=1)
    report = sweep(services)
    assert (report.purged_blobs, report.purged_bytes) == (1, len(data))
    assert not _blob_path(services, data).exists()
    assert _blob_row(services, data) is None
    # The deleted traceset's record stays; it no longer names bytes that are gone.
    deleted = http.get(f"/api/v1/tracesets/{ts['id']}").json()
    assert deleted["status"] == "deleted" and deleted["files"][0]["hash"] is None
    assert sweep(services) == SweepReport()  # idempotent


def test_shared_bytes_survive_the_other_tracesets_deletion_and_purge(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    shared = b"identical bytes in two tracesets " * 5000
    own = b"only in the first"
    first = upload(http, {"x.bin": (shared, "supporting"), "own.bin": (own, "supporting")})
    second = upload(http, {"renamed/y.bin": (shared, "supporting")})
    assert http.delete(f"/api/v1/tracesets/{first['id']}").status_code == 204
    clock.advance(days=2)
    report = sweep(services)
    assert (report.purged_blobs, report.purged_bytes) == (1, len(own))
    assert not _blob_path(services, own).exists()
    assert _download(http, second["id"], "renamed/y.bin") == shared
    validated = http.post(f"/api/v1/tracesets/{second['id']}/validate").json()
    assert validated["valid"] is True and validated["checks"][0]["passed"] is True

    # Once the second goes too, the shared bytes go after their own grace period.
    assert http.delete(f"/api/v1/tracesets/{second['id']}").status_code == 204
    clock.advance(hours=23)
    assert sweep(services).purged_blobs == 0
    assert _blob_path(services, shared).exists()
    clock.advance(hours=1)
    assert sweep(services).purged_blobs == 1
    assert not _blob_path(services, shared).exists()


def test_a_blob_declared_by_an_in_flight_upload_survives_and_the_upload_completes(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    data = b"bytes a new upload is about to send again" * 1000
    first = upload(http, {"a.bin": (data, "supporting")})
    http.delete(f"/api/v1/tracesets/{first['id']}")
    clock.advance(hours=23)
    files = {"b.bin": (data, "supporting")}
    spec = {"name": "b.bin", "size": len(data), "role": "supporting", "sha256": _sha(data)}
    declared = http.post(UPLOAD_URL, json={"name": "again", "files": [spec]})
    assert declared.status_code == 200, declared.text
    started = declared.json()
    clock.advance(hours=2)  # past the grace; the session is still open
    assert sweep(services).purged_blobs == 0
    assert _blob_path(services, data).exists()

    # While any completion holds its lease, nothing is purged (it may be adopting a blob).
    with services.db.session() as session:
        session.execute(
            update(db.UploadSession)
            .where(db.UploadSession.id == started["uploadId"])
            .values(
                state="completing", lease_owner="other", lease_until=clock() + timedelta(minutes=1)
            )
        )
    assert sweep(services).purge_deferred is True
    with services.db.session() as session:
        session.execute(
            update(db.UploadSession)
            .where(db.UploadSession.id == started["uploadId"])
            .values(state="open", lease_owner=None, lease_until=None)
        )

    fresh = http.get(f"{UPLOAD_URL}/{started['uploadId']}").json()  # part URLs live 1 h
    done = complete(http, started["uploadId"], put_parts(http, fresh, files))
    assert done.status_code == 201, done.text
    clock.advance(days=3)
    assert sweep(services).purged_blobs == 0
    assert _download(http, started["tracesetId"], "b.bin") == data


def test_expired_session_fails_its_traceset_removes_partial_bytes_and_answers_410(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    files = {"a.bin": (b"a" * 1000, "supporting"), "b.bin": (b"b" * 10, "supporting")}
    started = request_upload(http, files).json()
    etags = put_parts(http, started, files)
    staging = services.settings.data_dir / "blobs" / "staging" / started["uploadId"]
    assert staging.is_dir()
    clock.advance(hours=23, minutes=59)
    assert sweep(services).failed_sessions == 0
    clock.advance(minutes=1)
    assert sweep(services).failed_sessions == 1
    assert _status(http, started["tracesetId"]) == "upload_failed"
    assert not staging.exists()
    late = complete(http, started["uploadId"], etags)
    assert assert_error(late, 410, "GONE")["message"] == (
        f"Upload session '{started['uploadId']}' has expired"
    )
    assert http.get(f"/api/v1/tracesets/upload-url/{started['uploadId']}").status_code == 410
    assert sweep(services).failed_sessions == 0


def test_session_expiry_found_by_complete_before_the_sweeper(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    files = {"a.bin": (b"a" * 1000, "supporting")}
    started = request_upload(http, files).json()
    etags = put_parts(http, started, files)
    clock.advance(hours=25)
    assert complete(http, started["uploadId"], etags).status_code == 410
    assert _status(http, started["tracesetId"]) == "upload_failed"
    assert sweep(services).failed_sessions == 0
    # The failed traceset itself expires with its TTL like any other.
    clock.advance(days=7)
    assert sweep(services).expired_tracesets == 1


def test_finished_sessions_leftover_staging_is_cleaned(
    http: TestClient, services: Services
) -> None:
    files = {"a.bin": (b"a" * 100, "supporting")}
    ts = upload(http, files)
    services.wait_for_background()  # the completion's own removal of its staged bytes
    with services.db.session(write=False) as session:
        upload_id = session.scalar(
            select(db.UploadSession.id).where(db.UploadSession.traceset_id == ts["id"])
        )
    leftover = services.settings.data_dir / "blobs" / "staging" / str(upload_id)
    leftover.mkdir(parents=True)
    (leftover / "0.data").write_bytes(b"stale")
    os.link(leftover / "0.data", leftover / "0.00001.claim")
    assert sweep(services).cleaned_staging == 1
    assert not leftover.exists()


def test_staging_the_database_never_recorded_is_collected_after_a_grace(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    # What a process killed between staging and commit leaves (an object store stages at
    # upload-url; the embedded store at a file's first part, of a recorded session, so it
    # is a part racing the end of its session there).
    orphan_id = new_id("upload", now=clock().timestamp())
    for position in range(3):
        (services.settings.data_dir / "blobs" / "staging" / orphan_id / str(position)).mkdir(
            parents=True
        )
    files = {"a.bin": (b"a" * 100, "supporting")}
    live = request_upload(http, files).json()
    put_parts(http, live, files)  # a live session's staging, which stays
    assert sweep(services).cleaned_staging == 0  # it may still be being started
    clock.advance(seconds=ORPHAN_GRACE.total_seconds() + 1)
    assert sweep(services).cleaned_staging == 1
    assert set(services.store.staged_uploads()) == {live["uploadId"]}
    assert not (services.settings.data_dir / "blobs" / "staging" / orphan_id).exists()


def test_ids_tell_when_they_were_made() -> None:
    moment = datetime(2026, 5, 1, 12, 30, 15, tzinfo=UTC)
    assert created_at(new_id("upload", now=moment.timestamp())) == moment
    assert created_at("upload_not-an-id") is None
    assert created_at("upload_" + "z" * 27) is None


def test_sweeper_with_the_bytes_in_s3_aborts_staging_and_deletes_objects(
    settings: Settings,
    clock: FakeClock,
    s3_server: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s3 = build_services(with_s3_bytes(settings, s3_server, monkeypatch), clock=clock)
    store = s3.store
    assert isinstance(store, S3BlobStore)
    try:
        bootstrap(s3.db, s3.settings.data_dir, clock())
        token = (s3.settings.data_dir / ADMIN_TOKEN_FILE).read_text().strip()
        kept = {"k.bin": (b"kept" * 100, "supporting")}
        gone = {"g.bin": (b"gone" * 100, "supporting")}
        with (
            TestClient(create_app(services=s3), raise_server_exceptions=False) as http,
            httpx.Client(trust_env=False, timeout=60) as direct,
        ):
            http.headers["Authorization"] = f"Bearer {token}"
            ids = {}
            for name, files in (("kept", kept), ("gone", gone)):
                started = request_upload(http, files).json()
                done = complete(http, started["uploadId"], put_parts(direct, started, files))
                assert done.status_code == 201, done.text
                ids[name] = started["tracesetId"]
            stale = request_upload(http, {"s.bin": (b"stale", "supporting")}).json()
            put_parts(direct, stale, {"s.bin": (b"stale", "supporting")})
            assert stale["uploadId"] in set(store.staged_uploads())
            http.delete(f"/api/v1/tracesets/{ids['gone']}")
            clock.advance(days=2)
            report = sweep(s3)
            assert (report.failed_sessions, report.purged_blobs) == (1, 1)
            assert stale["uploadId"] not in set(store.staged_uploads())
            assert not store.blob_exists(_sha(gone["g.bin"][0]))
            assert store.blob_exists(_sha(kept["k.bin"][0]))
            assert _download_via(http, direct, ids["kept"], "k.bin") == kept["k.bin"][0]
    finally:
        s3.close()


def _download_via(http: TestClient, direct: httpx.Client, traceset_id: str, name: str) -> bytes:
    answer = http.get(f"/api/v1/tracesets/{traceset_id}/download", params={"file": name})
    return bytes(direct.get(str(answer.json()["url"])).content)


@pytest.fixture
def second_services(settings: Settings, clock: FakeClock) -> Iterator[Services]:
    """Another process's view of the same database and blob directory."""
    other = build_services(settings, clock=clock)
    yield other
    other.close()


@pytest.mark.slow
def test_two_sweepers_at_once_do_each_thing_exactly_once(
    http: TestClient, services: Services, second_services: Services, clock: FakeClock
) -> None:
    expiring = [
        upload(http, {f"e{i}.bin": (f"expiring {i}".encode() * 50, "supporting")}, ttlDays=1)
        for i in range(8)
    ]
    doomed = [
        upload(http, {f"d{i}.bin": (f"deleted {i}".encode(), "supporting")}) for i in range(6)
    ]
    for ts in doomed:
        http.delete(f"/api/v1/tracesets/{ts['id']}")
    sessions = [
        request_upload(http, {f"s{i}.bin": (b"s" * 10, "supporting")}).json() for i in range(5)
    ]
    keeper = upload(http, {"keep.bin": (b"kept", "supporting")}, ttlDays=30)
    clock.advance(days=2)  # past TTL, grace and session life

    reports: list[SweepReport] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(target: Services) -> None:
        try:
            barrier.wait()
            for _ in range(3):
                reports.append(sweep(target))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in (services, second_services)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(r.expired_tracesets for r in reports) == len(expiring)
    assert sum(r.failed_sessions for r in reports) == len(sessions)
    # The doomed blobs were stamped two days ago; the expiring ones only now.
    assert sum(r.purged_blobs for r in reports) == len(doomed)
    for ts in expiring:
        assert _status(http, ts["id"]) == "deleted"
    for started in sessions:
        assert _status(http, started["tracesetId"]) == "upload_failed"
    clock.advance(days=1)
    totals = [sweep(services), sweep(second_services)]
    assert sum(r.purged_blobs for r in totals) == len(expiring)
    assert _status(http, keeper["id"]) == "ready"
    assert _download(http, keeper["id"], "keep.bin") == b"kept"


@pytest.mark.slow
def test_two_gc_processes_at_once_share_the_work(
    http: TestClient, services: Services, settings: Settings
) -> None:
    """Real processes on one database and blob directory, each on the real clock."""
    expiring = [
        upload(http, {f"e{i}.bin": (f"expiring {i}".encode(), "supporting")}) for i in range(6)
    ]
    doomed = [upload(http, {f"d{i}.bin": (f"doomed {i}".encode(), "supporting")}) for i in range(4)]
    for ts in doomed:
        http.delete(f"/api/v1/tracesets/{ts['id']}")
    past = datetime.now(UTC) - timedelta(days=2)
    with services.db.session() as session:
        session.execute(
            update(db.Traceset)
            .where(db.Traceset.id.in_([ts["id"] for ts in expiring]))
            .values(expires_at=past)
        )
        session.execute(
            update(db.Blob)
            .where(db.Blob.unreferenced_since.is_not(None))
            .values(unreferenced_since=past)
        )
    env = {**os.environ, "TRACESTORE_DATABASE_URL": settings.resolved_database_url}
    command = [sys.executable, "-m", "tracestore.cli", "gc", "--json"]
    command += ["--data-dir", str(settings.data_dir)]
    processes = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    reports = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err.decode()
        reports.append(json.loads(out))
    assert sum(r["expiredTracesets"] for r in reports) == len(expiring)
    assert sum(r["purgedBlobs"] for r in reports) == len(doomed)
    for ts in expiring:
        assert _status(http, ts["id"]) == "deleted"


def test_the_server_sweeps_on_a_timer_and_stops_cleanly(
    settings: Settings, clock: FakeClock, admin_token: str, services: Services
) -> None:
    timed = services
    timed.settings = settings.model_copy(
        update={"sweep_interval": timedelta(seconds=0.05), "in_process_worker": True}
    )
    with TestClient(create_app(services=timed)) as client:
        client.headers["Authorization"] = f"Bearer {admin_token}"
        ts = upload(client, {"a.bin": (b"abc", "supporting")}, ttlDays=1)
        clock.advance(days=2)
        wait_until(lambda: _status(client, ts["id"]) == "deleted", "the timer never swept", 10)


def test_gc_command_sweeps_a_data_directory(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["gc", "--data-dir", str(tmp_path / "data"), "--init", "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    assert report["expiredTracesets"] == 0 and report["purgedBlobs"] == 0
    human = runner.invoke(main, ["gc", "--data-dir", str(tmp_path / "data")])
    assert human.exit_code == 0 and "expired 0 tracesets" in human.output


@pytest.mark.slow
def test_a_zero_purge_grace_lets_gc_reclaim_the_bytes_now(
    http: TestClient, services: Services, settings: Settings
) -> None:
    """``TRACESTORE_PURGE_GRACE=0 tracestore gc`` exited 1 ("expected a positive
    duration"): an operator who must free the disk now could not (issue 41)."""
    kept = upload(http, {"kept.bin": (b"still used", "supporting")})
    deleted = upload(http, {"gone.bin": (b"deleted just now", "supporting")})
    assert http.delete(f"/api/v1/tracesets/{deleted['id']}").status_code == 204
    with services.db.session() as session:  # on the real clock the command runs on
        session.execute(
            update(db.Blob)
            .where(db.Blob.unreferenced_since.is_not(None))
            .values(unreferenced_since=datetime.now(UTC) - timedelta(seconds=1))
        )
    command = [sys.executable, "-m", "tracestore.cli", "gc", "--json"]
    command += ["--data-dir", str(settings.data_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACESTORE_")}
    env["TRACESTORE_DATABASE_URL"] = settings.resolved_database_url
    reports = []
    for grace in ("PT24H", "0"):
        result = subprocess.run(
            command,
            env={**env, "TRACESTORE_PURGE_GRACE": grace},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        reports.append(json.loads(result.stdout)["purgedBlobs"])
    assert reports == [0, 1]
    assert _blob_row(services, b"deleted just now") is None
    assert not _blob_path(services, b"deleted just now").exists()
    assert _download(http, kept["id"], "kept.bin") == b"still used"
