"""The client commands through Click's runner, against the real app in-process."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.httpserver import serving
from tests.support.paths import TESTDATA
from tests.support.tenancy import person
from tracestore.choices import STATUSES
from tracestore.cli import main
from tracestore.cli.local_service import SERVICE_FILE, record_service
from tracestore.cli.output import NEXT_STEPS, with_url
from tracestore.client import Client, RetryPolicy
from tracestore.client.retries import RetryWait
from tracestore.errors import ERRORS_BY_CODE, NetworkError
from tracestore.server.services import Services
from tracestore.server.settings import MIB


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    directory = tmp_path / "traces"
    (directory / "sub").mkdir(parents=True)
    (directory / "rank_0.json").write_bytes(os.urandom(6 * MIB + 3))
    (directory / "sub" / "rank_1.json").write_bytes(b'{"x": 1}')
    return directory


@pytest.fixture
def meta_file(tmp_path: Path) -> Path:
    path = tmp_path / "meta.json"
    path.write_text('{"parallelism": {"dp": 2, "tp": 1}, "workload_family": "llama", "lr": 2.0}')
    return path


def upload(run: Any, traces: Path, meta_file: Path, *extra: str) -> dict[str, Any]:
    result = run("upload", str(traces), "--workload-metadata", str(meta_file), "--json", *extra)
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_upload_human_and_json(run: Any, traces: Path, meta_file: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("n")
    result = run(
        "upload", str(traces), "--workload-metadata", str(meta_file), "--supporting", str(notes)
    )
    assert result.exit_code == 0, result.output
    traceset_id, status, *_ = result.stdout.split()
    assert traceset_id.startswith("ts_") and status == "ready"
    # When it goes, and how to keep it, right at upload (issue 43, item 2).
    shown = json.loads(run("show", traceset_id, "--json").stdout)
    assert result.stdout.splitlines()[1] == (
        f"{traceset_id} expires {shown['expiresAt']}, 7 days after its last use (a download "
        f"counts); keep it: tracestore promote --url http://testserver {traceset_id}"
    )
    assert (
        f"expires:     {shown['expiresAt']} (7 days after its last use; "
        f"tracestore promote {traceset_id} keeps it)"
    ) in run("show", traceset_id).stdout
    # The --url it was given is in the hint (a resume elsewhere would miss the service).
    assert (
        "resume with: tracestore upload --url http://testserver --resume upload_" in result.stderr
    )

    data = upload(run, traces, meta_file, "--name", "named", "--tag", "x")
    assert data["name"] == "named" and data["tags"] == ["x"]
    assert data["rankCountDerived"] == 2
    assert {f["name"] for f in data["files"]} == {"rank_0.json", "sub/rank_1.json"}
    assert data["workloadMetadata"]["lr"] == 2.0


def test_upload_json_keeps_metadata_numbers_as_written(
    run: Any, traces: Path, meta_file: Path
) -> None:
    result = run("upload", str(traces), "--workload-metadata", str(meta_file), "--json")
    assert '"workloadMetadata":{"parallelism":{"dp":2,"tp":1},"workload_family":"llama",' in (
        result.stdout
    )
    assert '"lr":2.0}' in result.stdout
    shown = run("show", json.loads(result.stdout)["id"], "--json")
    assert '"lr":2.0}' in shown.stdout


def test_upload_usage_errors_exit_2(run: Any, traces: Path, tmp_path: Path) -> None:
    missing = run("upload", str(traces))
    assert missing.exit_code == 2
    assert "must declare a rank count" in missing.stderr

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert run("upload", str(traces), "--workload-metadata", str(bad)).exit_code == 2
    assert run("upload", str(tmp_path / "nope")).exit_code == 2

    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"shape": {"rankCount": 0}}')
    refused = run("upload", str(traces), "--workload-metadata", str(wrong))
    assert refused.exit_code == 2
    assert "workloadMetadata.shape.rankCount must be a whole number of at least 1, got 0" in (
        refused.stderr
    )


def test_supporting_only_upload(run: Any, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("n")
    result = run("upload", str(notes), "--role", "supporting", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rankCountDerived"] is None


def test_show(run: Any, traces: Path, meta_file: Path) -> None:
    data = upload(run, traces, meta_file)
    human = run("show", data["id"])
    assert human.exit_code == 0, human.output
    assert f"id:          {data['id']}" in human.stdout
    assert "ranks:       2" in human.stdout
    assert "sub/rank_1.json" in human.stdout
    as_json = run("show", data["id"], "--json")
    assert json.loads(as_json.stdout)["id"] == data["id"]


def test_api_error_prints_message_next_step_and_request_id(run: Any) -> None:
    result = run("show", "ts_missing")
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "Error: Traceset 'ts_missing' not found"
    # The next step repeats the --url the command was given.
    assert lines[1].strip() == with_url(NEXT_STEPS["NOT_FOUND"], "http://testserver")
    assert "`tracestore ls --url http://testserver`" in lines[1]
    assert lines[2].strip().startswith("(request id req_")


def test_every_error_code_has_a_next_step() -> None:
    assert set(ERRORS_BY_CODE) <= set(NEXT_STEPS)


def test_bad_token_exits_1(run: Any) -> None:
    result = run("show", "ts_x", token="wrong")
    assert result.exit_code == 1
    assert "Invalid or missing authentication token" in result.stderr
    assert NEXT_STEPS["UNAUTHORIZED"] in result.stderr


def test_the_local_service_and_its_admin_token_are_found_in_the_data_dir(
    app_http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    obj = {"http": app_http}
    data_dir = services.settings.data_dir
    monkeypatch.setenv("TRACESTORE_DATA_DIR", str(data_dir))
    missing = runner.invoke(main, ["ls"], obj=obj)
    assert missing.exit_code == 2
    assert "No API token" in missing.stderr and "no running `tracestore serve`" in missing.stderr

    # A service of this process (alive) records where it listens: no --url needed.
    record_service(data_dir, "http://127.0.0.1:9000")
    found = runner.invoke(main, ["ls"], obj=obj)
    assert found.exit_code == 0, found.output
    assert runner.invoke(main, ["ls", "--url", "http://127.0.0.1:9000/"], obj=obj).exit_code == 0
    # Any other service never gets the local admin token.
    for other in ("http://127.0.0.1:8000", "http://example.invalid:9000"):
        refused = runner.invoke(main, ["ls", "--url", other], obj=obj)
        assert refused.exit_code == 2
        assert "only sent to the service that wrote it (http://127.0.0.1:9000)" in refused.stderr

    # A record whose process is gone is stale: its token is not sent anywhere.
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    record = json.loads((data_dir / SERVICE_FILE).read_text())
    record["pid"] = int(gone.stdout)
    (data_dir / SERVICE_FILE).write_text(json.dumps(record))
    stale = runner.invoke(main, ["ls"], obj=obj)
    assert stale.exit_code == 2 and "is not running" in stale.stderr


@pytest.mark.slow
def test_a_service_that_answered_and_went_away_is_waited_for(tmp_path: Path) -> None:
    # A restart of a service that was answering is waited out with the long patience,
    # saying so; a few seconds would fail uploads through every restart.
    answered: list[str] = []

    class Once(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answered.append(self.path)
            page = {"items": [], "pagination": {"count": 0, "hasMore": False, "nextCursor": None}}
            body = json.dumps(page).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    waits: list[RetryWait] = []
    with serving(Once) as url:
        client = Client(url, "t", retry=RetryPolicy(patience=6.0, on_wait=waits.append))
        assert list(client.list_tracesets()) == []
    started = time.monotonic()
    with client, pytest.raises(NetworkError):
        list(client.list_tracesets())
    assert time.monotonic() - started >= 6.0 > RetryPolicy.unreached_patience
    assert waits and all(wait.reached for wait in waits)
    assert answered == ["/api/v1/tracesets"]


@pytest.mark.slow
def test_the_local_service_recorded_running_is_waited_for_while_it_restarts(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The data directory's `tracestore serve` is alive but not listening yet (a restart):
    # the command waits for it, saying so, as long as for a service that answered.
    data_dir = services.settings.data_dir
    monkeypatch.setenv("TRACESTORE_DATA_DIR", str(data_dir))
    record_service(data_dir, "http://127.0.0.1:9")
    started = time.monotonic()
    result = CliRunner().invoke(main, ["ls"], env={"TRACESTORE_RETRY_SECONDS": "4.5"})
    assert result.exit_code == 1
    assert time.monotonic() - started >= 4.5 > RetryPolicy.unreached_patience
    assert "Waiting for the service (Cannot reach http://127.0.0.1:9" in result.stderr


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "localhost", "ftp://host", "http://"])
def test_a_url_that_cannot_name_a_service_is_a_usage_error_at_once(url: str) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(main, ["ls", "--url", url, "--token", "t"])
    assert result.exit_code == 2, result.output
    assert time.monotonic() - started < 2
    assert "must start with http:// or https://" in result.stderr
    if "://" not in url:  # what was meant, at once
        assert f"did you mean http://{url}?" in result.stderr
    assert "Traceback" not in result.output


def test_a_url_given_with_the_api_prefix_reaches_the_api(
    app_http: TestClient, admin_token: str
) -> None:
    # Issue 43, 9: --url http://host:8000/api/v1 asked for /api/v1/api/v1/tracesets.
    result = CliRunner().invoke(
        main,
        ["ls", "--url", "http://testserver/api/v1/", "--token", admin_token],
        obj={"http": app_http},
    )
    assert result.exit_code == 0, result.output


def test_a_retry_budget_that_is_not_a_number_is_a_usage_error() -> None:
    result = CliRunner().invoke(
        main,
        ["ls", "--url", "http://127.0.0.1:9", "--token", "t"],
        env={"TRACESTORE_RETRY_SECONDS": "soon"},
    )
    assert result.exit_code == 2
    assert "TRACESTORE_RETRY_SECONDS='soon' is not a number" in result.stderr


def test_ls_inspected_facts_and_world_size(
    run: Any, traces: Path, meta_file: Path, tmp_path: Path
) -> None:
    plain = upload(run, traces, meta_file, "--name", "plain")
    meta = tmp_path / "dlrm.json"
    meta.write_text('{"shape": {"rankCount": 8}}')
    dlrm = upload(run, TESTDATA / "kineto-dlrm-8ranks", meta, "--name", "dlrm")

    def ids(*args: str) -> list[str]:
        result = run("ls", "--json", *args)
        assert result.exit_code == 0, result.output
        return [item["id"] for item in json.loads(result.stdout)]

    assert ids("--inspected", "gpu_model=V100-SXM2-32GB") == [dlrm["id"]]
    assert ids("--inspected", "gpu_model=H100") == []
    assert ids("--inspected", "backend=nccl", "--inspected", "world_size=8") == [dlrm["id"]]
    assert ids("--min-world-size", "8", "--max-world-size", "8") == [dlrm["id"]]
    assert plain["id"] in ids()
    shown = run("show", dlrm["id"])
    # The traceset's own checks, then apart from them the tools it is (not) ready for.
    assert "census:      ok (rank census, parallelism, process groups)" in shown.stdout
    assert "ready for:   HTA, Perfetto" in shown.stdout
    assert "not ready:   Chakra, ASTRA-sim (tracestore validate says why)" in shown.stdout
    checked = run("validate", dlrm["id"])
    assert checked.exit_code == 0, checked.output
    assert "FAIL" not in checked.stdout  # a tool it is not ready for is no failed check
    verdict = f"{dlrm['id']} is valid"
    lines = checked.stdout.splitlines()
    assert verdict in lines
    after = lines[lines.index(verdict) + 1 :]
    assert after[0] == "Which tools can read it (this does not make it invalid):"
    assert after[1].startswith("  ready for HTA: 8 Kineto traces, one per rank")
    assert after[2].startswith("  not ready for Chakra: no host execution trace for ranks 0..7")
    refused = run("ls", "--inspected", "gpu_model")
    assert refused.exit_code == 2 and "'gpu_model' is not FACT=VALUE" in refused.output
    unknown = run("ls", "--inspected", "gpu=H100")
    assert unknown.exit_code == 1
    assert "Unknown inspected fact 'gpu' in 'inspected.gpu'" in unknown.stderr


def test_ls_human_json_filters_and_limit(
    run: Any, traces: Path, meta_file: Path, tmp_path: Path, clock: FakeClock
) -> None:
    first = upload(run, traces, meta_file, "--name", "alpha")
    clock.advance(seconds=1)  # newest first needs distinct creation times
    other_meta = tmp_path / "other.json"
    other_meta.write_text('{"shape": {"rankCount": 2, "global_batch_size": 1024}}')
    second = upload(run, traces, other_meta, "--name", "beta")

    human = run("ls")
    assert human.exit_code == 0, human.output
    header, *rows = human.stdout.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "STATUS"]
    assert [row.split()[0] for row in rows] == [second["id"], first["id"]]
    assert "llama" in rows[1]

    as_json = json.loads(run("ls", "--json").stdout)
    assert [item["id"] for item in as_json] == [second["id"], first["id"]]
    assert as_json[1]["workload"]["workload_family"] == "llama"

    def ids(*args: str) -> list[str]:
        result = run("ls", "--json", *args)
        assert result.exit_code == 0, result.output
        return [item["id"] for item in json.loads(result.stdout)]

    assert ids("--workload-family", "llama") == [first["id"]]
    assert ids("--filter", "shape.global_batch_size=1024") == [second["id"]]
    assert ids("--search", "ALP") == [first["id"]]
    assert ids("--sort", "name:asc") == [first["id"], second["id"]]
    assert ids("--limit", "1") == [second["id"]]
    assert ids("--status", "uploading") == []
    assert run("ls", "--filter", "nonsense").exit_code == 2
    bad_sort = run("ls", "--sort", "color:asc")
    assert bad_sort.exit_code == 1
    assert "Invalid sort field: 'color'" in bad_sort.stderr


def test_ls_takes_every_status_the_api_takes(run: Any, traces: Path, meta_file: Path) -> None:
    """Issue 42: ``ls --status processing`` was refused by the command's own list of four
    statuses while the API filters by all six; both now read ``schemas.STATUSES``."""
    done = upload(run, traces, meta_file)
    for status in STATUSES:
        result = run("ls", "--json", "--status", status)
        assert result.exit_code == 0, (status, result.output)
        found = [item["id"] for item in json.loads(result.stdout)]
        assert found == ([done["id"]] if status == "ready" else []), status
    refused = run("ls", "--status", "nosuch")
    assert refused.exit_code == 2 and "'processing'" in refused.stderr


def test_promote(run: Any, traces: Path, meta_file: Path, tmp_path: Path) -> None:
    data = upload(run, traces, meta_file)  # two files without a rank: its census fails
    shown = run("show", data["id"]).stdout
    assert "census:      FAILED: rank census: 2 of 2 ranks missing: 0..1" in shown
    refused = run("promote", data["id"])
    assert refused.exit_code == 1
    assert f"Error: Traceset '{data['id']}' fails its census: rank_census: 2 of 2" in (
        refused.stderr
    )
    assert (
        "  Check it with `tracestore validate --url http://testserver ID`: a traceset that is "
        "not ready cannot be promoted; one that fails its census can, as it is, with --force."
    ) in refused.stderr
    human = run("promote", data["id"], "--force")
    assert human.exit_code == 0, human.output
    assert human.stdout.strip() == f"{data['id']} promoted to tenant"
    # Kept for good, and show says so (issue 43, item 2).
    assert "expires:     never (promoted)" in run("show", data["id"]).stdout
    again = run("promote", data["id"], "--json")
    assert json.loads(again.stdout) == {
        "id": data["id"],
        "scope": "tenant",
        "promotionApplied": False,
    }
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"shape": {"rankCount": 8}}')
    refused = run("promote", data["id"], "--target", "public", "--workload-metadata", str(wrong))
    assert refused.exit_code == 1
    assert "rank count 8" in refused.stderr
    assert "--workload-metadata FILE` (whole numbers as JSON numbers" in refused.stderr


def test_download(run: Any, traces: Path, meta_file: Path, tmp_path: Path) -> None:
    data = upload(run, traces, meta_file)
    out = tmp_path / "out"
    human = run("download", data["id"], "-o", str(out))
    assert human.exit_code == 0, human.output
    assert sorted(human.stdout.split()) == sorted(
        [str(out / "rank_0.json"), str(out / "sub" / "rank_1.json")]
    )
    for name in ("rank_0.json", "sub/rank_1.json"):
        assert (out / name).read_bytes() == (traces / name).read_bytes()
    one = run("download", data["id"], "--file", "sub/rank_1.json", "-o", str(tmp_path / "one"))
    assert one.exit_code == 0
    assert [p.name for p in (tmp_path / "one").rglob("*") if p.is_file()] == ["rank_1.json"]
    as_json = run("download", data["id"], "-o", str(tmp_path / "j"), "--json")
    assert len(json.loads(as_json.stdout)) == 2
    assert run("download", data["id"], "--file", "nope", "-o", str(out)).exit_code == 1


def test_validate(run: Any, traces: Path, meta_file: Path) -> None:
    data = upload(run, traces, meta_file)
    human = run("validate", data["id"])
    assert "file_integrity" in human.stdout
    as_json = json.loads(run("validate", data["id"], "--json").stdout)
    checks = {c["name"]: c["passed"] for c in as_json["checks"]}
    assert checks["file_integrity"] is True
    assert human.exit_code == (0 if as_json["valid"] else 1)


def test_rm(run: Any, traces: Path, meta_file: Path) -> None:
    first = upload(run, traces, meta_file)
    second = upload(run, traces, meta_file)
    human = run("rm", first["id"])
    assert (human.exit_code, human.stdout.strip()) == (0, f"deleted {first['id']}")
    as_json = run("rm", second["id"], "--json")
    assert json.loads(as_json.stdout) == {"id": second["id"], "status": "deleted"}
    assert json.loads(run("show", first["id"], "--json").stdout)["status"] == "deleted"
    assert run("rm", "ts_missing").exit_code == 1


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    for command in (
        "serve",
        "token",
        "workspace",
        "upload",
        "ls",
        "show",
        "promote",
        "download",
        "validate",
        "rm",
    ):
        assert f"  {command}" in result.stdout


def test_upload_warns_or_with_strict_refuses_when_local_ranks_disagree(
    run: Any, tmp_path: Path
) -> None:
    chakra = TESTDATA / "chakra-allreduce-4ranks"
    four = tmp_path / "four.json"
    four.write_text('{"shape": {"rankCount": 4}}')
    matching = run("upload", str(chakra), "--workload-metadata", str(four))
    assert matching.exit_code == 0, matching.output
    assert "Warning" not in matching.stderr

    eight = tmp_path / "eight.json"
    eight.write_text('{"shape": {"rankCount": 8}}')
    warned = run("upload", str(chakra), "--workload-metadata", str(eight))
    assert warned.exit_code == 0, warned.output
    assert warned.stderr.startswith("Warning: ")

    refused = run("upload", str(chakra), "--workload-metadata", str(eight), "--strict")
    # A data problem, not a usage one: exit 1 as `inspect --strict`, one line per finding and
    # one saying what was refused, no click Usage block (issue 43, item 9).
    assert refused.exit_code == 1
    lines = refused.stderr.splitlines()
    assert all(line.startswith("Error: ") for line in lines), refused.stderr
    assert lines[-1] == (
        "Error: not uploaded: the local checks disagree with the metadata (--strict); "
        "fix the files or the metadata, or upload without --strict"
    )
    assert "Usage:" not in refused.stderr and "Uploading" not in refused.stderr


def test_resume_of_an_upload_that_completed_answers_its_traceset(
    run: Any, app_http: TestClient, admin_token: str, traces: Path, meta_file: Path
) -> None:
    # A completion whose 201 was lost (the client crashed after sending it).
    started: list[str] = []
    with Client("http://testserver", admin_token, http=app_http) as client:
        traceset = client.upload_traceset(
            traces,
            workload_metadata=json.loads(meta_file.read_text()),
            on_started=lambda session: started.append(session.upload_id),
        )
    result = run("upload", "--resume", started[0], str(traces))
    assert result.exit_code == 0, result.output
    assert result.stdout.split()[:2] == [traceset.id, "ready"]
    assert result.stdout.splitlines()[1].startswith(f"{traceset.id} expires ")
    # Promoted meanwhile, it is kept for good, and the resumed upload says so (issue 43, 2).
    assert run("promote", traceset.id, "--force").exit_code == 0
    result = run("upload", "--resume", started[0], str(traces))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1] == f"{traceset.id} never expires (promoted)"


DLRM = sorted((TESTDATA / "kineto-dlrm-8ranks").iterdir())
NOTES = b"how these traces were made\n"


def test_cli_download_ranks(run: Any, tmp_path: Path) -> None:
    meta = tmp_path / "dlrm.json"
    meta.write_text('{"shape": {"rankCount": 8}}')
    source = tmp_path / "dlrm"
    source.mkdir()
    for path in DLRM:
        (source / path.name).write_bytes(path.read_bytes())
    notes = tmp_path / "notes.txt"
    notes.write_bytes(NOTES)
    ts = upload(run, source, meta, "--supporting", str(notes))
    tmp_path = tmp_path / "out"
    result = run("download", ts["id"], "--ranks", "6-7", "-o", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    written = sorted(Path(p).name for p in json.loads(result.stdout))
    assert written == sorted(p.name for p in DLRM if p.name[6] in "67")
    with_notes = run("download", ts["id"], "--ranks", "0", "--supporting", "-o", str(tmp_path))
    assert with_notes.exit_code == 0, with_notes.output
    assert (tmp_path / "notes.txt").read_bytes() == NOTES
    unknown = run("download", ts["id"], "--ranks", "9", "-o", str(tmp_path))
    assert unknown.exit_code != 0
    assert f"Unknown rank 9 for traceset '{ts['id']}': its files hold ranks 0-7" in unknown.output
    both = run("download", ts["id"], "--ranks", "0", "--file", "notes.txt")
    assert both.exit_code == 2 and "Give --file or --ranks, not both" in both.output


# What a hostile uploader writes where a terminal reads it: a window title (OSC 0), the
# clipboard (OSC 52), a CSI by its one-byte C1 form, DEL, a right-to-left override, and
# rich's markup (issue 41).
HOSTILE = "a\x1b]0;title\x07b\x1b]52;c;cHduZWQ=\x07c\x9b31m\x7f\u202e[bold]d"
HOSTILE_SHOWN = "a\\x1b]0;title\\x07b\\x1b]52;c;cHduZWQ=\\x07c\\x9b31m\\x7f\\u202e[bold]d"
# Every character a terminal would obey rather than show, but the newline ending a line.
OBEYED = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _hostile_archive(tmp_path: Path) -> Path:
    """A tar of two Kineto traces, one ranked and one whose member name is HOSTILE."""
    path = tmp_path / "ranks.tar"
    with tarfile.open(path, "w") as archive:
        for name, trace in (
            (f"{HOSTILE}.json", {"traceEvents": []}),
            ("rank_1.json", {"distributedInfo": {"rank": 1}, "traceEvents": []}),
        ):
            data = json.dumps(trace).encode()
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return path


def test_strings_from_the_service_print_their_control_characters_escaped(
    run: Any, services: Services, tmp_path: Path
) -> None:
    """ls, show and validate printed names, descriptions, tags, metadata and archive member
    names raw: a window title, the clipboard (OSC 52). --json stays exact."""
    meta = tmp_path / "hostile.json"
    meta.write_text(json.dumps({"shape": {"rankCount": 2}, "workload_family": HOSTILE}))
    archive = _hostile_archive(tmp_path)
    done = run(
        *("upload", str(archive), "--workload-metadata", str(meta), "--json"),
        *("--name", HOSTILE, "--description", HOSTILE, "--tag", HOSTILE),
    )
    assert done.exit_code == 0, done.output
    traceset_id = json.loads(done.stdout)["id"]
    services.wait_for_background()  # the archive's inspection: its member names
    for words in (("ls",), ("show", traceset_id), ("validate", traceset_id)):
        human = run(*words)
        assert human.exit_code in (0, 1), human.output
        assert not OBEYED.search(human.output), (words, human.output)
        assert HOSTILE_SHOWN in human.stdout, (words, human.stdout)
        exact = json.loads(run(*words, "--json").stdout)
        assert any(HOSTILE in text for text in _strings(exact)), words
    shown = run("show", traceset_id).stdout
    for member in ("name:        ", "description: ", "tags:        "):
        assert f"{member}{HOSTILE_SHOWN}\n" in shown
    assert f"{HOSTILE_SHOWN}.json" in run("validate", traceset_id).stdout  # the member


def test_an_error_message_prints_its_control_characters_escaped(run: Any) -> None:
    result = run("show", f"ts_{HOSTILE}")
    assert result.exit_code == 1
    assert not OBEYED.search(result.output), result.output
    assert result.stderr.splitlines()[0] == f"Error: Traceset 'ts_{HOSTILE_SHOWN}' not found"


def test_a_member_promoting_to_public_is_told_who_may(
    run: Any, services: Services, traces: Path, meta_file: Path
) -> None:
    member = person(services, "member", "default", ["default"])
    data = upload(run, traces, meta_file)
    assert run("promote", data["id"], "--force").exit_code == 0
    refused = run("promote", data["id"], "--target", "public", token=member.token)
    assert refused.exit_code == 1
    # Not "you are not a member of that workspace" (they are), nor an admin-only command.
    assert refused.stderr.splitlines()[:2] == [
        "Error: Promotion to public needs a tenant admin",
        "  Promotion to public needs a tenant admin of your tenant: ask one to promote it.",
    ]
    assert "workspace list" not in refused.stderr


def test_upload_says_what_promotion_will_refuse_and_what_was_meant(
    run: Any, tmp_path: Path
) -> None:
    chakra = TESTDATA / "chakra-allreduce-4ranks"
    # The seed: upload stores descriptive members as given and checks only the rank count,
    # so a string global_batch_size is accepted; promotion's typed model refuses it later.
    meta = tmp_path / "meta.json"
    meta.write_text('{"shape": {"rankCount": 4, "global_batch_size": "1024", "rank_cout": 4}}')
    warned = run("upload", str(chakra), "--workload-metadata", str(meta), "--json")
    assert warned.exit_code == 0, warned.output
    stored = json.loads(warned.stdout)["workloadMetadata"]
    assert stored["shape"]["global_batch_size"] == "1024"
    assert warned.stderr.splitlines()[:2] == [
        "Warning: workloadMetadata.shape.rank_cout is not a member the rules read: did you "
        "mean `rank_count`?",
        "Warning: stored as given, but promotion will refuse it: "
        'workloadMetadata.shape.global_batch_size must be a whole number of at least 1, got "1024"',
    ]
    # Promotion refuses it naming the member, and the command says how to promote it.
    promoted = run("promote", json.loads(warned.stdout)["id"])
    assert promoted.exit_code == 1
    lines = promoted.stderr.splitlines()
    assert lines[0].startswith(
        "Error: workloadMetadata.shape.global_batch_size must be a whole number of at least 1, "
        'got "1024" (in the workloadMetadata stored at upload'
    )
    assert lines[1] == (
        "  Promote with the metadata corrected: `tracestore promote --url http://testserver ID "
        "--workload-metadata FILE` (whole numbers as JSON numbers, snake_case descriptive "
        "members, the rank count of the upload)."
    )
    strict = run("upload", str(chakra), "--workload-metadata", str(meta), "--strict")
    assert strict.exit_code == 1
    assert "Error: stored as given, but promotion will refuse it: " in strict.stderr
    assert "Uploading" not in strict.stderr

    # The seed's own words when nothing is declared, then what was meant.
    near = tmp_path / "near.json"
    near.write_text('{"shape": {"rank_count": 4}}')
    refused = run("upload", str(chakra), "--workload-metadata", str(near))
    assert refused.exit_code == 2
    assert (
        "Uploads with primary trace files must declare a rank count: set "
        "workloadMetadata.shape.rankCount, or workloadMetadata.parallelism degrees "
        "(dp, tp, sp, ep, pp) (workloadMetadata.shape.rank_count is not read as a declaration "
        "of the rank count: did you mean `rankCount`?)"
    ) in " ".join(refused.stderr.split())


def test_ls_shows_an_incomplete_traceset_as_such_and_filters_by_census(
    run: Any, tmp_path: Path
) -> None:
    meta = tmp_path / "eight.json"
    meta.write_text('{"shape": {"rankCount": 8}}')
    kineto = sorted((TESTDATA / "kineto-dlrm-8ranks").iterdir())
    made = {}
    for name, ranks in (
        ("whole", range(8)),
        ("no-rank-3", [0, 1, 2, 4, 5, 6, 7]),
        ("half", [0, 1, 2, 3]),
    ):
        directory = tmp_path / name
        directory.mkdir()
        for rank in ranks:
            (directory / kineto[rank].name).write_bytes(kineto[rank].read_bytes())
        made[name] = upload(run, directory, meta, "--name", name)["id"]
    listed = run("ls")
    assert listed.exit_code == 0, listed.output
    lines = {line.split()[1]: line for line in listed.stdout.splitlines()[1:]}
    assert listed.stdout.splitlines()[0].split()[:5] == ["ID", "NAME", "STATUS", "CENSUS", "SCOPE"]
    assert lines["whole"].split()[2:4] == ["ready", "pass"]
    assert lines["no-rank-3"].split()[2:5] == ["ready", "FAIL", "(1"]
    assert "FAIL (1 missing)" in lines["no-rank-3"] and "FAIL (4 missing)" in lines["half"]
    failed = run("ls", "--census", "fail", "--json")
    assert failed.exit_code == 0, failed.output
    items = json.loads(failed.stdout)
    assert {item["id"]: item["missingRanks"] for item in items} == {
        made["no-rank-3"]: 1,
        made["half"]: 4,
    }
    assert all(item["census"] == "fail" for item in items)
    passed = [item["id"] for item in json.loads(run("ls", "--census", "pass", "--json").stdout)]
    assert passed == [made["whole"]]
    wrong = run("ls", "--census", "failed")
    assert (
        wrong.exit_code == 2 and "'failed' is not one of 'pass', 'fail', 'unknown'" in wrong.output
    )
