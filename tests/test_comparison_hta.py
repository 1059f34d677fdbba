"""HTA 0.5.0's TraceDiff as the oracle of the comparison (ANALYTICS.md, "Where HTA is the
oracle"; issue 45, item 4): ``TraceDiff.compare_traces`` and ``ops_diff`` with every
iteration of each side and ``device_type=DeviceType.GPU``, run in a process of its own
(``tests/support/hta_oracle.py diff``), equal ours per kernel name (counts, durations, their
differences) and in the five name sets: on pairs of ranks of the real DLRM sample, on a
real rank against a modified copy of itself, and on synthetic pairs of several steps with
kernels launched outside every step or with no launch in the file. Where we differ on
purpose (a file without steps; fractional times) the test asserts the difference
(docs/analysis.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import hta_oracle
from tests.support.comparison_traces import ADAM, ALL_REDUCE, BASE, GEMM, OTHER, RELU, SOFTMAX, run
from tests.support.kineto_traces import TraceBuilder
from tracestore.analysis import analyze_path
from tracestore.analysis.compare import compare_sides, side_of

pytestmark = pytest.mark.slow
SAMPLES = sorted((Path(__file__).with_name("data") / "kineto-dlrm-8ranks").iterdir())


def hta_diff(control: Path, test: Path) -> dict[str, Any]:
    """HTA's comparison of the one rank in each directory (a bounded child process)."""
    return hta_oracle.ask("diff", str(control), str(test), "-", "-")


def ours(control: Path, test: Path) -> dict[str, Any]:
    sides = []
    for directory in (control, test):
        (path,) = directory.iterdir()
        outcome = analyze_path(path, path.name)
        assert outcome.rank is not None, outcome.reason
        sides.append(
            (str(directory), [side_of(outcome.rank.rank, path.name, outcome.rank.analysis)])
        )
    return compare_sides(sides[0], sides[1])


def pair(
    tmp_path: Path, control: bytes | TraceBuilder, test: bytes | TraceBuilder
) -> tuple[Path, Path]:
    directories = []
    for label, trace in (("control", control), ("test", test)):
        directory = tmp_path / label
        directory.mkdir(parents=True)
        path = directory / f"{label}.pt.trace.json"
        if isinstance(trace, TraceBuilder):
            trace.write(path)
        else:
            path.write_bytes(trace)
        directories.append(directory)
    return directories[0], directories[1]


def assert_equal_to_hta(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    rows = {row["name"]: row for row in mine["kernels"]}
    assert set(rows) == set(theirs["kernels"])
    for name, row in theirs["kernels"].items():
        for key, value in row.items():
            assert rows[name][key] == pytest.approx(value, abs=1e-9), (name, key)
    for key, names in theirs["sets"].items():
        assert mine[key] == names, key


@pytest.mark.parametrize(("a", "b"), [(0, 1), (2, 5), (7, 3), (4, 4)])
def test_pairs_of_real_ranks_equal_hta(tmp_path: Path, a: int, b: int) -> None:
    control, test = pair(tmp_path, SAMPLES[a].read_bytes(), SAMPLES[b].read_bytes())
    mine, theirs = ours(control, test), hta_diff(control, test)
    assert_equal_to_hta(mine, theirs)
    assert len(mine["kernels"]) > 50
    if a == b:
        assert mine["kernels"] and {k["diffDurationUs"] for k in mine["kernels"]} == {0}


def _modified(data: bytes) -> bytes:
    """A real rank changed as a new run would change it: one kernel renamed (a name deleted,
    one added), every other call of another dropped, a third 20 % slower."""
    trace = json.loads(data)
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    names = sorted({e["name"] for e in kernels}, key=lambda n: sum(e["name"] == n for e in kernels))
    renamed, thinned, slower = names[0], names[-1], names[-2]
    dropped = 0
    events = []
    for event in trace["traceEvents"]:
        if event.get("cat") == "kernel":
            if event["name"] == renamed:
                event["name"] = renamed + "_v2"
            elif event["name"] == thinned:
                dropped += 1
                if dropped % 2:
                    continue
            elif event["name"] == slower:
                event["dur"] = int(event["dur"] * 1.2) + 1
        events.append(event)
    trace["traceEvents"] = events
    return json.dumps(trace).encode()


def test_a_real_rank_against_a_modified_copy_equals_hta(tmp_path: Path) -> None:
    data = SAMPLES[0].read_bytes()
    control, test = pair(tmp_path, data, _modified(data))
    mine, theirs = ours(control, test), hta_diff(control, test)
    assert_equal_to_hta(mine, theirs)
    assert len(mine["added"]) == len(mine["deleted"]) == 1
    assert mine["added"] == [mine["deleted"][0] + "_v2"]
    assert len(mine["decreased"]) == 1
    assert mine["kernels"][0]["diffDurationUs"] > 0  # the slower kernel comes first


def _several_steps(
    steps: list[list[tuple[str, int]]], *, stray: bool, first_row: bool = True
) -> TraceBuilder:
    t = run(0, steps, world=1)
    if first_row:  # a host event as the file's first row, as in a real trace (below)
        t.host("aten::empty", 990, 1)
        t.events.insert(0, t.events.pop())
    if stray:
        t.device(GEMM, 50_000, 40, launch=49_990)  # launched after the last step
        t.device(RELU, 1005, 3, stream=8, launch_in_file=False)  # its launch not in the file
        t.device(ADAM, 900, 9, stream=8, launch=880)  # launched before the first step
    return t


@pytest.mark.parametrize("stray", [False, True], ids=["in-steps", "with-strays"])
def test_synthetic_pairs_of_several_steps_equal_hta(tmp_path: Path, stray: bool) -> None:
    control, test = pair(
        tmp_path, _several_steps(BASE, stray=stray), _several_steps(OTHER, stray=stray)
    )
    mine, theirs = ours(control, test), hta_diff(control, test)
    assert_equal_to_hta(mine, theirs)
    assert mine["added"] == [SOFTMAX] and mine["deleted"] == [ADAM]
    assert mine["unchanged"] == [ALL_REDUCE]


def test_files_without_steps_are_compared_here_not_by_hta(tmp_path: Path) -> None:
    control, test = pair(
        tmp_path, run(0, BASE, world=1, first_step=-1), run(0, OTHER, world=1, first_step=-1)
    )
    mine = ours(control, test)
    assert {k["name"]: k["diffCount"] for k in mine["kernels"]}[GEMM] == 1
    assert mine["added"] == [SOFTMAX]
    theirs = hta_diff(control, test)  # every iteration of none: nothing compared
    assert theirs["kernels"] == {} and theirs["sets"]["added"] == []


def test_fractional_times_are_kept_here_where_hta_rounds_them(tmp_path: Path) -> None:
    control_trace, test_trace = TraceBuilder(0), TraceBuilder(0)
    for t, dur in ((control_trace, 10.4), (test_trace, 10.6)):
        t.step(1, 100, 100)
        t.step(2, 200, 100)
        t.device(GEMM, 110.5, dur, launch=105)
        t.device(GEMM, 210.5, dur, launch=205)
    control, test = pair(tmp_path, control_trace, test_trace)
    mine, theirs = ours(control, test), hta_diff(control, test)
    row = mine["kernels"][0]
    assert (row["baseDurationUs"], row["otherDurationUs"]) == (20.8, 21.2)
    # HTA: [ceil(ts), floor(ts + dur)): 110.5 + 10.4 -> [111, 120], 110.5 + 10.6 -> [111, 121].
    hta_row = theirs["kernels"][GEMM]
    assert (hta_row["baseDurationUs"], hta_row["otherDurationUs"]) == (18, 20)
    assert mine["unchanged"] == theirs["sets"]["unchanged"] == [GEMM]


def test_a_kernel_launched_by_the_files_first_row_counts_here_not_in_hta(tmp_path: Path) -> None:
    """HTA joins a kernel to its launch's row by index and reads index 0 as "no launch": the
    kernel launched by the file's first event belongs to no iteration there."""
    control, test = pair(
        tmp_path,
        _several_steps(BASE, stray=False, first_row=False),
        _several_steps(OTHER, stray=False, first_row=False),
    )
    mine, theirs = ours(control, test), hta_diff(control, test)
    rows = {row["name"]: row for row in mine["kernels"]}
    assert (rows[GEMM]["baseCount"], rows[GEMM]["otherCount"]) == (3, 4)
    hta_gemm = theirs["kernels"][GEMM]
    assert (hta_gemm["baseCount"], hta_gemm["otherCount"]) == (2, 3)
    assert hta_gemm["baseDurationUs"] == 153 - 50 and hta_gemm["otherDurationUs"] == 218 - 70
