"""``tracestore analyze`` on the real samples and on folders holding bad files too."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from click.testing import CliRunner, Result

from tests.support.kineto_traces import TraceBuilder
from tests.support.paths import TESTDATA
from tracestore.analysis import analyze_path, traceset_json
from tracestore.analysis.model import KERNEL_ROWS
from tracestore.cli import main

KINETO = TESTDATA / "kineto-dlrm-8ranks"
RANK_MEMBERS = {
    *("rank", "file", "status", "reason"),
    *("temporal", "overlap", "kindBreakdown", "kernels", "idle", "steps"),
}


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_a_table_per_rank_a_summary_and_the_top_kernels() -> None:
    result = run("analyze", str(KINETO), "--top", "3")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        *("rank", "file", "compute", "%", "non-compute", "%", "idle", "%", "overlap", "%"),
        *("median", "step"),
    ]
    assert lines[1].split() == [
        *("0", "worker0_step_12.1694128201545.pt.trace.json", "7.95", "42.71", "49.34"),
        *("4.50", "14.455", "ms"),
    ]
    assert [line.split()[0] for line in lines[1:9]] == [str(r) for r in range(8)]
    assert "median over 8 ranks: compute 7.37 % (6.35-9.66)" in result.stdout
    assert "slowest rank 1, fastest 7" in result.stdout
    # The real sample's ranks 1 and 3 compute 1.17 × the median rank (issue 45).
    stragglers = [line for line in lines if line.startswith("straggler: ")]
    assert [line.split()[2] for line in stragglers] == ["1", "3", "7"]
    assert stragglers[0] == (
        "straggler: rank 1 computes 1.17 × the median rank per step and started last in 0 of "
        "8 collectives"
    )
    kernels = lines[lines.index("top kernels by total time, over all ranks:") + 2 :]
    assert len(kernels) == 3
    assert kernels[0].split()[:2] == ["COMMUNICATION", "40"]
    assert "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t" in kernels[0]


def test_json_is_the_apis_object() -> None:
    result = run("analyze", str(KINETO), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"status", "reason", "analyzedAt", "ranks", "summary"}
    assert (data["status"], data["reason"]) == ("complete", None)
    assert [entry["rank"] for entry in data["ranks"]] == list(range(8))
    assert all(set(entry) == RANK_MEMBERS for entry in data["ranks"])
    expected = [analyze_path(path, path.name).rank for path in sorted(KINETO.iterdir())]
    local = traceset_json([e for e in expected if e], KERNEL_ROWS, analyzed_at=data["analyzedAt"])
    assert data == json.loads(json.dumps(local))


def test_each_bad_file_gets_a_line_and_the_rest_still_answers(tmp_path: Path) -> None:
    shutil.copy(KINETO / "worker3_step_12.1694128201557.pt.trace.json", tmp_path / "good.json")
    trace = TraceBuilder(5, world=8)
    trace.step(1, 0, 100)
    trace.device("gemm", 10, 20)
    trace.write(tmp_path / "packed.json.gz", compression="gzip")
    whole = (KINETO / "worker1_step_12.1694128201556.pt.trace.json").read_bytes()
    (tmp_path / "cut.json").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "notes.txt").write_text("not a trace\n")
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(whole)[:5000])
    result = run("analyze", str(tmp_path))
    assert result.exit_code == 1
    assert sorted(result.stderr.splitlines()) == [
        "cut.json.gz: truncated: the gzip stream ends before its end marker",
        f"cut.json: truncated: the trace ends inside an event after {len(whole) // 2} bytes",
        "notes.txt: not a Kineto trace (read as unknown)",
    ]
    assert [line.split()[:2] for line in result.stdout.splitlines()[1:3]] == [
        ["3", "good.json"],
        ["5", "packed.json.gz"],
    ]
    as_json = run("analyze", str(tmp_path), "--json")
    assert as_json.exit_code == 1
    # The Kineto traces that could not be analysed are entries too, with their reasons, as
    # the service answers them (the file that is no Kineto trace is not).
    answer = json.loads(as_json.stdout)
    assert answer["status"] == "complete"
    entries = [(e["rank"], e["file"], e["status"]) for e in answer["ranks"]]
    assert entries == [
        (1, "cut.json", "failed"),
        (1, "cut.json.gz", "failed"),
        (3, "good.json", "complete"),
        (5, "packed.json.gz", "complete"),
    ]
    reasons = {e["file"]: e["reason"] for e in answer["ranks"]}
    assert reasons["cut.json"] == (
        f"truncated: the trace ends inside an event after {len(whole) // 2} bytes"
    )
    assert answer["summary"]["rankCount"] == 2


def test_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    result = run("analyze", str(tmp_path / "nowhere"))
    assert result.exit_code == 2
    assert "does not exist" in result.output
