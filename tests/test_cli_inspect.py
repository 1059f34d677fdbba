"""``tracestore inspect`` on the real samples and on sets the tests write."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.support.inspect_fixtures import comms_values, execution_trace_with_rows, kineto_trace
from tests.support.paths import TESTDATA
from tracestore.cli import main
from tracestore.cli.inspect import ranges_text

KINETO = TESTDATA / "kineto-dlrm-8ranks"
CHAKRA = TESTDATA / "chakra-allreduce-4ranks"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_a_complete_kineto_set(tmp_path: Path) -> None:
    code, out = run("inspect", str(KINETO))
    assert code == 0, out
    assert "kineto_json" in out and "ranks found: 0-7" in out
    assert "ok rank census" in out
    code, out = run("inspect", str(KINETO), "--json")
    data = json.loads(out)
    assert sorted(f["rank"] for f in data["files"]) == list(range(8))
    assert data["census"]["ranksFound"] == list(range(8))


def test_metadata_that_disagrees_is_reported_and_fails_with_strict(tmp_path: Path) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text('{"shape": {"rankCount": 4}}')
    code, out = run("inspect", str(KINETO), "--workload-metadata", str(meta))
    assert code == 0
    assert "FAILED rank census" in out and "4" in out
    code, _ = run("inspect", str(KINETO), "--workload-metadata", str(meta), "--strict")
    assert code == 1


def test_chakra_ranks_come_from_names_and_a_missing_rank_is_named(tmp_path: Path) -> None:
    for rank in (0, 1, 3):
        source = CHAKRA / f"all_reduce.{rank}.et"
        (tmp_path / source.name).write_bytes(source.read_bytes())
    meta = tmp_path.parent / "meta-chakra.json"
    meta.write_text('{"parallelism": {"dp": 4}}')
    code, out = run("inspect", str(tmp_path), "--workload-metadata", str(meta), "--strict")
    assert code == 1
    assert "ranks found: 0-1, 3" in out and "ranks missing: 2 (1)" in out


def test_bad_metadata_and_missing_paths_are_usage_errors(tmp_path: Path) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text('{"shape": {"rankCount": "4"}}')
    code, out = run("inspect", str(KINETO), "--workload-metadata", str(meta))
    assert code == 2 and "workloadMetadata.shape.rankCount" in out
    code, out = run("inspect", str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in out


def test_ranges_text() -> None:
    assert ranges_text([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert ranges_text([]) == ""


def test_every_rank_shows_where_it_comes_from(tmp_path: Path) -> None:
    code, out = run("inspect", str(KINETO))
    assert code == 0, out
    assert "rank from" in out and "distributedInfo" in out
    assert "where each rank comes from:" in out
    assert 'worker3_step_12.1694128201557.pt.trace.json: distributedInfo {"rank": 3' in out
    code, out = run("inspect", str(CHAKRA / "all_reduce.2.et"))
    assert "all_reduce.2.et: file name" in out and "(<prefix>.<rank>.et)" in out
    et = TESTDATA / "pytorch-et-resnet50-ddp-2ranks"
    code, out = run("inspect", str(et), "--json")
    data = json.loads(out)
    assert [f["rankSource"] for f in data["files"]] == ["record_param_comms"] * 2
    assert all("default_pg" in text for text in data["census"]["rankProvenance"].values())


def test_kineto_and_et_halves_are_shown(tmp_path: Path) -> None:
    for rank in range(2):
        kineto = kineto_trace(rank, 2).replace(b'"pid": 4242', f'"pid": {70 + rank}'.encode())
        (tmp_path / f"rank{rank}.pt.trace.json").write_bytes(kineto)
        rows = [comms_values(rank, world_size=2)]
        (tmp_path / f"rank{rank}.et.json").write_bytes(
            execution_trace_with_rows(rows, pid=70 + rank)
        )
    code, out = run("inspect", str(tmp_path))
    assert code == 0, out
    assert "ranks 0-1: executionTrace + kineto" in out
    assert "ok rank census" in out


def test_a_trace_holding_lone_surrogates_prints_json_and_escaped_text(tmp_path: Path) -> None:
    """A trace file's JSON may escape a lone surrogate ("\\udcff"); --json wrote it raw and
    the command died of a UnicodeEncodeError (issue 41). Now the inspection holds it as
    U+FFFD, as the service stores it (inspect.model.text), and both outputs are text."""
    trace = {
        "distributedInfo": {"rank": 0, "pg_config": [{"pg_name": "g\ud800", "pg_size": 2}]},
        "deviceProperties": [{"name": "gpu\udcff"}],
        "traceEvents": [],
    }
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(trace))  # ensure_ascii: the escapes, as a writer may leave them
    code, out = run("inspect", str(path), "--json")
    assert code == 0, out
    found = json.loads(out)["files"][0]
    assert found["gpuModels"] == ["gpu\ufffd"]
    assert found["processGroups"][0]["name"] == "g\ufffd"
    code, out = run("inspect", str(path))
    assert code == 0, out
    out.encode()  # no lone surrogate reached the terminal
