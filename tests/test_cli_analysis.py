"""A stored traceset's analysis from the command line and the client (issue 44, items 3 and
4): ``tracestore analysis ID`` prints what ``tracestore analyze`` prints for the same files,
``--json`` the service's object; ``tracestore ls`` and ``Client.list_tracesets`` filter and
sort on the summary."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from tests.support.kineto_traces import TraceBuilder, pytorch_json
from tests.support.paths import TESTDATA
from tests.support.uploading import upload
from tracestore import schemas
from tracestore.cli import main
from tracestore.client import Client
from tracestore.server.app import create_app
from tracestore.server.services import Services

KINETO = TESTDATA / "kineto-dlrm-8ranks"


@pytest.fixture
def app_http(services: Services, admin_token: str) -> Iterator[TestClient]:
    with TestClient(create_app(services=services), raise_server_exceptions=False) as http:
        http.headers["Authorization"] = f"Bearer {admin_token}"
        yield http


@pytest.fixture
def run(app_http: TestClient, admin_token: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``run("ls", "--json")``: the command against the app, with the admin token."""
    for name in ("TRACESTORE_URL", "TRACESTORE_TOKEN", "TRACESTORE_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)

    def invoke(command: str, *args: str) -> Result:
        words = [command, "--url", "http://testserver", *args, "--token", admin_token]
        return CliRunner().invoke(main, words, obj={"http": app_http})

    return invoke


@pytest.fixture
def dlrm(app_http: TestClient, services: Services) -> dict[str, Any]:
    """The real 8-rank sample, uploaded and analysed."""
    files = {p.name: (p.read_bytes(), "primary") for p in sorted(KINETO.iterdir())}
    traceset = upload(app_http, files, {"shape": {"rankCount": 8}})
    services.wait_for_background()
    return traceset


def test_analysis_prints_what_analyze_prints_for_the_same_files(
    run: Any, dlrm: dict[str, Any]
) -> None:
    stored = run("analysis", dlrm["id"], "--top", "5")
    assert stored.exit_code == 0, stored.output
    local = CliRunner().invoke(main, ["analyze", str(KINETO), "--top", "5"])
    assert local.exit_code == 0, local.output
    assert stored.stdout == local.stdout
    assert "median over 8 ranks: compute 7.37 % (6.35-9.66)" in stored.stdout


def test_analysis_json_is_the_services_object(
    run: Any, dlrm: dict[str, Any], app_http: TestClient
) -> None:
    result = run("analysis", dlrm["id"], "--json")
    assert result.exit_code == 0, result.output
    served = app_http.get(f"/api/v1/tracesets/{dlrm['id']}/analysis").json()
    assert json.loads(result.stdout) == served
    some = json.loads(run("analysis", dlrm["id"], "--json", "--ranks", "6-7").stdout)
    assert some["ranks"] == served["ranks"][6:]


def test_the_clients_typed_answer(app_http: TestClient, dlrm: dict[str, Any]) -> None:
    with Client("http://testserver", app_http.headers["Authorization"][7:], http=app_http) as c:
        answer = c.get_analysis(dlrm["id"])
        assert isinstance(answer, schemas.TracesetAnalysis)
        assert answer.status == "complete" and answer.summary is not None
        assert [r.rank for r in answer.ranks] == list(range(8))
        first = answer.ranks[0]
        assert first.temporal is not None and first.temporal.idle_pct == 49.34
        assert first.kernels and first.kernels[0].kind == "COMMUNICATION"
        assert [r.rank for r in c.get_analysis(dlrm["id"], ranks="3").ranks] == [3]
        found = list(c.list_tracesets(max_idle_pct=54.61, min_overlap_pct=3.9))
        assert [t.id for t in found] == [dlrm["id"]]
        assert list(c.list_tracesets(max_idle_pct=54.6)) == []
        assert list(c.list_tracesets(min_idle_pct=1e-7, max_idle_pct=54.61))  # no exponent


def test_ls_filters_and_sorts_on_the_summary(
    run: Any, dlrm: dict[str, Any], app_http: TestClient, tmp_path: Path
) -> None:
    trace = TraceBuilder(0, world=1)
    trace.step(1, 0, 100)
    trace.step(2, 100, 100)
    trace.device("gemm", 10, 80)
    trace.device("gemm", 110, 80)
    files = {"busy.json": (pytorch_json(trace.trace()).encode(), "primary")}
    busy = upload(app_http, files, {"shape": {"rankCount": 1}}, name="busy")
    app_http.app.state.services.wait_for_background()  # type: ignore[attr-defined]

    def ids(*args: str) -> list[str]:
        result = run("ls", "--json", *args)
        assert result.exit_code == 0, result.output
        return [item["id"] for item in json.loads(result.stdout)]

    assert ids("--max-idle-pct", "20") == [busy["id"]]  # the DLRM ranks idle more than half
    assert ids("--min-idle-pct", "50") == [dlrm["id"]]
    assert ids("--min-overlap-pct", "3") == [dlrm["id"]]  # busy has no communication
    assert ids("--sort", "step_time:desc") == [dlrm["id"], busy["id"]]
    assert ids("--sort", "step_time:asc") == [busy["id"], dlrm["id"]]
    refused = run("ls", "--max-idle-pct", "101")
    assert refused.exit_code == 2 and "101" in refused.output


def test_pending_none_and_a_failed_file_are_said(
    run: Any, app_http: TestClient, services: Services
) -> None:
    files = {p.name: (p.read_bytes(), "primary") for p in sorted(KINETO.iterdir())[:2]}
    files["cut.json"] = (files.pop(sorted(files)[1])[0][:-100], "primary")
    traceset = upload(app_http, files, {"shape": {"rankCount": 2}})
    pending = run("analysis", traceset["id"])
    assert pending.exit_code == 1  # the cut file is known not to be analysable already
    lines = pending.stdout.splitlines()
    assert lines[0] == "pending: the analysis is still running (1 of its files read so far)"
    assert lines[1:3] == ["not analysed:", lines[2]] and "cut.json (rank 1)" in lines[2]
    services.wait_for_background()
    done = run("analysis", traceset["id"])
    assert done.exit_code == 1, done.output  # a file could not be analysed
    lines = done.stdout.splitlines()
    assert lines[1].split()[:2] == ["0", "worker0_step_12.1694128201545.pt.trace.json"]
    where = lines.index("not analysed:")
    assert lines[where + 1].startswith("  cut.json (rank 1): not analysed: its inspection failed:")
    notes = upload(app_http, {"notes.txt": (b"no trace\n", "primary")}, {"shape": {"rankCount": 1}})
    none = run("analysis", notes["id"])
    assert none.exit_code == 0 and none.stdout == "none: the traceset holds no Kineto trace\n"
    missing = run("analysis", "ts_nope")
    assert missing.exit_code == 1 and "Traceset 'ts_nope' not found" in missing.stderr
