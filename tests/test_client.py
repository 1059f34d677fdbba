"""The real Client against the real app in-process (TestClient is an httpx.Client)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.support.uploading import one_part_session
from tracestore import errors, jsontext, schemas
from tracestore.client import Client, MetadataWarning, ProgressEvent, UploadInterrupted
from tracestore.schemas import format_timestamp
from tracestore.server import db
from tracestore.server.services import Services
from tracestore.server.settings import MIB

META = {"shape": {"rankCount": 2}}


@pytest.fixture
def client(app_http: TestClient, admin_token: str) -> Client:
    return Client("http://testserver", admin_token, http=app_http)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tracesets_count(services: Services) -> int:
    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(db.Traceset)) or 0


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, bytes]:
    """A directory of traces (one spanning three 5 MiB parts, one empty, one nested)."""
    files = {
        "rank_0.json": os.urandom(11 * MIB + 7),
        "rank_1.json": b"",
        "nested/dir/rank_2.json": os.urandom(1000),
    }
    for name, data in files.items():
        write(tmp_path / "traces" / name, data)
    return files


def test_upload_directory_round_trip(
    client: Client, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    config = write(tmp_path / "config.yaml", b"tp: 1\n")
    events: list[ProgressEvent] = []
    metadata = jsontext.loads('{"shape":{"rankCount":2},"lr":2.0,"steps":1e3,"x":null}')

    traceset = client.upload_traceset(
        [tmp_path / "traces"],
        workload_metadata=metadata,
        supporting=[config],
        tags=["a", "b"],
        description="three ranks",
        concurrency=4,
        progress=events.append,
    )

    assert traceset.status == "ready"
    assert traceset.name == "traces"
    assert traceset.rank_count_derived == 2
    # The inspection is typed as everything else (issue 43, item 11).
    inspection = client.get_traceset(traceset.id).inspection
    assert isinstance(inspection, schemas.Inspection) and inspection.census is not None
    assert inspection.census.checks["rankCountMatches"].passed is not None
    assert inspection.readiness is not None and set(inspection.readiness) == {
        "hta",
        "chakra",
        "astra",
        "perfetto",
    }
    assert {f.name for f in inspection.files} == set(tree)
    # The result says when it goes and how to keep it (issue 43, item 2).
    assert traceset.expires_at is not None and traceset.ttl_days == 7
    assert traceset.expiry == (
        f"expires {format_timestamp(traceset.expires_at)}, 7 days after its last use "
        "(a download counts); promote it to keep it"
    )
    assert traceset.tags == ["a", "b"]
    got = {f.name: f for f in traceset.files}
    assert set(got) == {*tree, "config.yaml"}
    assert got["config.yaml"].role == "supporting"
    for name, data in tree.items():
        assert got[name].role == "primary"
        assert got[name].size == len(data)
        assert got[name].hash == f"sha256:{sha256(data)}"
    fetched = client.get_traceset(traceset.id)
    assert jsontext.dumps(fetched.workload_metadata) == (
        '{"shape":{"rankCount":2},"lr":2.0,"steps":1e3,"x":null}'
    )
    total = sum(map(len, tree.values())) + 6
    uploaded = sum(e.advance for e in events if e.phase == "upload")
    assert uploaded == total
    assert {e.phase for e in events} == {"upload", "complete"}  # hashed as it is sent


def test_metadata_checked_locally_before_any_request(
    client: Client, services: Services, tmp_path: Path
) -> None:
    write(tmp_path / "rank_0.et", b"x")
    with pytest.raises(errors.ValidationError) as caught:
        client.upload_traceset([tmp_path / "rank_0.et"], workload_metadata={"shape": {}})
    assert "must declare a rank count" in caught.value.message
    assert caught.value.request_id is None
    with pytest.raises(errors.ValidationError, match=r"parallelism\.tp must be a whole number"):
        client.upload_traceset(
            tmp_path / "rank_0.et", workload_metadata={"parallelism": {"tp": "8"}}
        )
    assert tracesets_count(services) == 0


def test_supporting_only_upload_needs_no_rank_count(client: Client, tmp_path: Path) -> None:
    traceset = client.upload_traceset(
        write(tmp_path / "notes.txt", b"hello"), role="supporting", name="notes"
    )
    assert traceset.rank_count_derived is None
    assert traceset.files[0].role == "supporting"


def test_bad_local_names_refused_before_any_request(
    client: Client, services: Services, tmp_path: Path
) -> None:
    write(tmp_path / "a" / "x.json", b"1")
    write(tmp_path / "b" / "x.json", b"2")
    with pytest.raises(errors.ValidationError, match="given twice"):
        client.upload_traceset([tmp_path / "a", tmp_path / "b"], workload_metadata=META)
    write(tmp_path / "c" / "bad name.json", b"3")
    with pytest.raises(errors.ValidationError, match="outside"):
        client.upload_traceset([tmp_path / "c"], workload_metadata=META)
    with pytest.raises(errors.ValidationError, match="does not exist"):
        client.upload_traceset([tmp_path / "missing"], workload_metadata=META)
    assert tracesets_count(services) == 0


def test_api_errors_carry_status_code_message_and_request_id(
    client: Client, app_http: TestClient
) -> None:
    with pytest.raises(errors.NotFound) as caught:
        client.get_traceset("ts_doesnotexist")
    error = caught.value
    assert (error.status, error.code) == (404, "NOT_FOUND")
    assert error.message == "Traceset 'ts_doesnotexist' not found"
    assert error.request_id and error.request_id.startswith("req_")

    with pytest.raises(errors.NotFound):  # an id is one path segment: never another route
        client.get_traceset("../upload-url/x")

    stranger = Client("http://testserver", "not-a-token", http=app_http)
    with pytest.raises(errors.Unauthorized) as denied:
        stranger.get_traceset("ts_x")
    assert denied.value.status == 401
    assert denied.value.message == "Invalid or missing authentication token"


def ctrl_c_after(limit: int) -> Callable[[ProgressEvent], None]:
    """A progress callback that presses Ctrl-C (SIGINT to this process, so the main thread
    gets KeyboardInterrupt as from a terminal) once ``limit`` bytes were sent."""
    sent = [0]

    def progress(event: ProgressEvent) -> None:
        if event.phase == "upload" and sent[0] < limit:
            sent[0] += event.advance
            if sent[0] >= limit:
                os.kill(os.getpid(), signal.SIGINT)

    return progress


def interrupted_upload(client: Client, path: Path, limit: int = 1) -> UploadInterrupted:
    with pytest.raises(UploadInterrupted) as caught:
        client.upload_traceset(
            path, workload_metadata=META, concurrency=1, progress=ctrl_c_after(limit)
        )
        time.sleep(5)  # the signal arrives at once; never reached
    return caught.value


def test_interrupted_upload_resumes_from_its_id(
    client: Client, services: Services, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    interrupted = interrupted_upload(client, tmp_path / "traces", 6 * MIB)
    upload_id = interrupted.upload_id
    session = client.resume_upload(upload_id)
    assert session.state == "open"
    assert client.get_traceset(interrupted.traceset_id).status == "uploading"

    events: list[ProgressEvent] = []
    traceset = client.upload_traceset(
        tmp_path / "traces", resume_upload_id=upload_id, progress=events.append
    )
    assert traceset.id == interrupted.traceset_id
    assert events[0].advance >= 5 * MIB  # the parts received before Ctrl-C were not re-sent
    assert traceset.status == "ready"
    assert {f.name: f.hash for f in traceset.files} == {
        n: f"sha256:{sha256(d)}" for n, d in tree.items()
    }
    assert tracesets_count(services) == 1


def test_resume_refuses_a_file_of_another_size(
    client: Client, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    interrupted = interrupted_upload(client, tmp_path / "traces")
    write(tmp_path / "traces" / "rank_1.json", b"grew")
    with pytest.raises(errors.IntegrityError, match="declared 0 bytes"):
        client.upload_traceset(tmp_path / "traces", resume_upload_id=interrupted.upload_id)


def test_resume_of_a_changed_file_fails_at_completion(
    client: Client, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    interrupted = interrupted_upload(client, tmp_path / "traces", 6 * MIB)
    held = client.resume_upload(interrupted.upload_id).files
    assert [p.part_number for f in held if f.name == "rank_0.json" for p in f.received_parts]
    # A byte of a part the service already holds: the resume hashes the file as it is now.
    data = bytearray(tree["rank_0.json"])
    data[0] ^= 0xFF
    write(tmp_path / "traces" / "rank_0.json", bytes(data))
    with pytest.raises(errors.UploadIncomplete) as failed:
        client.upload_traceset(tmp_path / "traces", resume_upload_id=interrupted.upload_id)
    assert isinstance(failed.value.cause, errors.ValidationError)
    assert "SHA-256 of file 'rank_0.json'" in failed.value.message
    assert client.get_traceset(interrupted.traceset_id).status == "uploading"


def test_low_level_upload_and_repeated_completion(client: Client, tmp_path: Path) -> None:
    data = os.urandom(3000)
    upload_id, etag = one_part_session(client, data)
    first = client.complete_upload(upload_id, {"a.bin": {1: etag}})
    again = client.complete_upload(upload_id, {"a.bin": {1: etag}})
    assert first == again
    assert first.files[0].hash == f"sha256:{sha256(data)}"


def test_delete(client: Client, tmp_path: Path) -> None:
    traceset = client.upload_traceset(write(tmp_path / "x.log", b"x"), role="supporting")
    client.delete_traceset(traceset.id)
    assert client.get_traceset(traceset.id).status == "deleted"


def test_list_iterates_every_page(client: Client, tmp_path: Path) -> None:
    ids = set()
    for index in range(5):
        path = write(tmp_path / f"f{index}.log", str(index).encode())
        ids.add(client.upload_traceset(path, role="supporting", name=f"set {index}").id)
    listed = [item.id for item in client.list_tracesets(page_size=2)]
    assert sorted(listed) == sorted(ids)
    assert len(list(client.list_tracesets(page_size=2, max_items=3))) == 3
    found = list(client.list_tracesets(search="SET 3"))
    assert [item.name for item in found] == ["set 3"]


def test_list_workload_filters(client: Client, tmp_path: Path) -> None:
    path = write(tmp_path / "rank_0.json", b"{}")
    meta: dict[str, Any] = {
        "shape": {"rankCount": 1, "global_batch_size": 1024},
        "workload_family": "llama",
        "workload_name": "llama-7b",
    }
    wanted = client.upload_traceset(path, workload_metadata=meta, name="wanted")
    client.upload_traceset(path, workload_metadata=META, name="other")
    found = list(
        client.list_tracesets(workload_family="llama", workload={"shape.global_batch_size": 1024})
    )
    assert [item.id for item in found] == [wanted.id]
    assert found[0].workload.workload_family == "llama"


def test_promote(client: Client, tmp_path: Path) -> None:
    traceset = client.upload_traceset(
        write(tmp_path / "rank_0.json", b"{}"), workload_metadata=META
    )
    answer = client.promote_traceset(
        traceset.id, workload_metadata={"shape": {"rankCount": 2}, "workload_family": "gpt"}
    )
    assert (answer.id, answer.scope, answer.promotion_applied) == (traceset.id, "tenant", True)
    # Promoted, it is kept for good, and the client's result says so (issue 43, item 2).
    assert client.get_traceset(traceset.id).expiry == "never expires (promoted)"
    again = client.promote_traceset(traceset.id, target="tenant")
    assert again.promotion_applied is False
    with pytest.raises(errors.UnprocessableEntity, match="rank count 8"):
        client.promote_traceset(traceset.id, "public", {"shape": {"rankCount": 8}})


def test_validate_and_resolve(client: Client, tmp_path: Path) -> None:
    data = os.urandom(2000)
    traceset = client.upload_traceset(write(tmp_path / "rank_0.json", data), workload_metadata=META)
    checks = client.validate_traceset(traceset.id)
    assert {c.name: c.passed for c in checks.checks}["file_integrity"] is True
    resolved = client.resolve_traceset(traceset.id)
    assert resolved.traceset_id == traceset.id
    assert resolved.files[0].size == len(data)
    assert resolved.total_size == len(data)


def test_download_verifies_and_resumes(
    client: Client, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    traceset = client.upload_traceset(tmp_path / "traces", workload_metadata=META)
    out = tmp_path / "out"
    written = client.download_traceset(traceset.id, out)
    assert sorted(p.relative_to(out).as_posix() for p in written) == sorted(tree)
    for name, data in tree.items():
        assert (out / name).read_bytes() == data

    # A partial file from an earlier, cut-off download is resumed with a Range request.
    data = tree["rank_0.json"]
    target = tmp_path / "resumed" / "rank_0.json"
    write(target.with_name("rank_0.json.partial"), data[: 3 * MIB])
    client.download_file(traceset.id, "rank_0.json", target)
    assert target.read_bytes() == data
    assert not target.with_name("rank_0.json.partial").exists()

    # A partial file whose bytes differ is caught by the SHA-256 check and discarded.
    bad = tmp_path / "bad" / "rank_0.json"
    write(bad.with_name("rank_0.json.partial"), b"\0" * MIB)
    with pytest.raises(errors.IntegrityError, match="SHA-256"):
        client.download_file(traceset.id, "rank_0.json", bad)
    assert not bad.exists() and not bad.with_name("rank_0.json.partial").exists()
    assert client.download_file(traceset.id, "rank_0.json", bad).read_bytes() == data

    with pytest.raises(errors.ValidationError, match="no file named"):
        client.download_traceset(traceset.id, out, files=["nope"])


def test_the_command_line_starts_without_the_client_stack() -> None:
    # `tracestore --help` took ~460 ms importing rich, pydantic and httpx at start; they load
    # in the commands that use them (bench/cli_start.py measures the start).
    code = (
        "import sys, tracestore.cli\n"
        "heavy = {'httpx', 'pydantic', 'pydantic_core', 'rich', 'tracestore.schemas',\n"
        "         'tracestore.client', 'tracestore.inspect', 'importlib.metadata'}\n"
        "loaded = sorted(m for m in heavy if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_loads_no_server_dependency() -> None:
    code = (
        "import sys, tracestore.client\n"
        "import tracestore.cli.client, tracestore.cli.listing, tracestore.cli.upload\n"
        "heavy = {'fastapi', 'sqlalchemy', 'boto3', 'uvicorn', 'starlette', 'alembic'}\n"
        "loaded = sorted(m for m in heavy if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_command_line_skips_httpx_s_own_command_line() -> None:
    # httpx imports its command line (rich, pygments) with itself when rich and click are
    # installed: ~85 ms of every command's start. The premise first, so that this test says
    # so when an httpx release stops doing it.
    bare = "import sys, httpx\nassert 'httpx._main' in sys.modules and 'pygments' in sys.modules\n"
    subprocess.run([sys.executable, "-c", bare], check=True)
    code = (
        "import sys, tracestore.cli, tracestore.client, httpx\n"
        "loaded = sorted(m for m in ('pygments', 'rich', 'rich.syntax') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
        "assert httpx.Client is not None and callable(httpx.main)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_inspection_model_keeps_what_the_server_adds_later() -> None:
    recorded = {
        "status": "complete",
        "inspectedAt": "2026-01-01T00:00:00.000Z",
        "census": {"ranksFound": [0], "later": {"x": 1}, "checks": {"new": {"passed": True}}},
        "analysis": [1, 2],
        "files": [{"name": "a.json", "format": "kineto_json", "newFact": "y"}],
    }
    inspection = schemas.Inspection.model_validate(recorded)
    assert inspection.model_extra == {"analysis": [1, 2]}
    assert inspection.census is not None and inspection.census.checks["new"].passed is True
    assert inspection.files[0].model_extra == {"newFact": "y"}
    # Written back as it was read: its members, in their order, and none it was not given.
    assert inspection.model_dump(mode="json", by_alias=True) == recorded
    assert list(inspection.model_dump(mode="json", by_alias=True)) == list(recorded)


def test_metadata_the_service_warns_of_is_a_metadata_warning(
    client: Client, tmp_path: Path
) -> None:
    # Issue 43, 8: a string global_batch_size was accepted without a word, then refused at
    # promotion. Upload still accepts it (the seed), but the client says so.
    path = write(tmp_path / "rank_0.json", b'{"traceEvents": []}')
    metadata = {"shape": {"rankCount": 1, "global_batch_size": "256"}}
    with pytest.warns(MetadataWarning) as warned:
        traceset = client.upload_traceset(path, workload_metadata=metadata)
    assert traceset.status == "ready"
    assert [str(w.message) for w in warned] == [
        "stored as given, but promotion will refuse it: workloadMetadata.shape."
        'global_batch_size must be a whole number of at least 1, got "256"'
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # metadata promotion takes: no warning at all
        client.upload_traceset(path, workload_metadata={"shape": {"rankCount": 1}})
