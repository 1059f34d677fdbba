"""The comparison of two tracesets as pure code (ANALYTICS.md, "Comparison of two tracesets";
issue 45, item 2) and ``tracestore compare`` of local paths: per kernel name the counts and
durations and their differences, slower first; the five name sets; the steps chosen; the
ranks paired; the per-rank differences, per step when the step counts differ."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.bounded import bounded_memory
from tests.support.comparison_traces import (
    ADAM,
    ALL_REDUCE,
    BASE,
    GEMM,
    OTHER,
    RELU,
    SOFTMAX,
    Steps,
    write_run,
)
from tracestore.analysis import analyze_path
from tracestore.analysis.compare import RankSide, compare_sides, pair_ranks, side_of
from tracestore.cli import main
from tracestore.errors import Conflict, ValidationError
from tracestore.ranks import parse_ranks


def sides(directory: Path) -> list[RankSide]:
    found = []
    for path in sorted(directory.iterdir()):
        outcome = analyze_path(path, path.name)
        assert outcome.rank is not None, outcome.reason
        found.append(side_of(outcome.rank.rank, path.name, outcome.rank.analysis))
    return sorted(found, key=lambda s: (s.rank is None, s.rank or 0))


def compared(
    tmp_path: Path, base: dict[int | None, Steps], other: dict[int | None, Steps], **kw: Any
) -> dict[str, Any]:
    directories = []
    for label, ranks in (("base", base), ("other", other)):
        directory = tmp_path / label
        directory.mkdir(parents=True)
        first = kw.pop(f"{label}_first_step", 1)
        for rank, steps in ranks.items():
            write_run(directory / f"rank{rank}.json", rank, steps, first_step=first)
        directories.append(directory)
    runs = {k: parse_ranks(v, k) for k, v in kw.items()}
    return compare_sides(
        ("A", sides(directories[0])),
        ("B", sides(directories[1])),
        runs.get("base_ranks"),
        runs.get("other_ranks"),
        runs.get("steps"),
    )


def by_name(answer: dict[str, Any]) -> dict[str, tuple[int, int, Any, Any, int, Any]]:
    return {
        k["name"]: (
            k["baseCount"],
            k["otherCount"],
            k["baseDurationUs"],
            k["otherDurationUs"],
            k["diffCount"],
            k["diffDurationUs"],
        )
        for k in answer["kernels"]
    }


def test_kernels_their_changes_and_the_five_name_sets(tmp_path: Path) -> None:
    answer = compared(tmp_path, {0: BASE}, {0: OTHER})
    assert by_name(answer) == {
        GEMM: (3, 4, 153, 218, 1, 65),
        RELU: (4, 3, 43, 31, -1, -12),
        SOFTMAX: (0, 3, 0, 63, 3, 63),
        ADAM: (3, 0, 21, 0, -3, -21),
        ALL_REDUCE: (3, 3, 285, 245, 0, -40),
    }
    # Slower first by how much, then faster by how much.
    assert [k["name"] for k in answer["kernels"]] == [GEMM, SOFTMAX, ALL_REDUCE, ADAM, RELU]
    assert answer["added"] == [SOFTMAX]
    assert answer["deleted"] == [ADAM]
    assert answer["increased"] == [GEMM]
    assert answer["decreased"] == [RELU]
    assert answer["unchanged"] == [ALL_REDUCE]
    assert answer["base"] == {"traceset": "A", "ranks": [0]}
    assert answer["other"] == {"traceset": "B", "ranks": [0]}
    assert answer["steps"] is None


def test_steps_choose_the_kernels_launched_in_them(tmp_path: Path) -> None:
    answer = compared(tmp_path, {0: BASE}, {0: OTHER}, steps="2")
    assert by_name(answer) == {
        GEMM: (1, 1, 52, 72, 0, 20),
        RELU: (2, 1, 22, 10, -1, -12),
        SOFTMAX: (0, 1, 0, 21, 1, 21),
        ADAM: (1, 0, 7, 0, -1, -7),
        ALL_REDUCE: (1, 1, 90, 80, 0, -10),
    }
    assert answer["steps"] == "2"
    (pair,) = answer["ranks"]
    assert pair["base"]["steps"] == pair["other"]["steps"] == 1
    nothing = compared(tmp_path / "none", {0: BASE}, {0: OTHER}, steps="7-9")
    assert nothing["kernels"] == [] and nothing["unchanged"] == []


def test_a_file_without_steps_counts_every_kernel(tmp_path: Path) -> None:
    answer = compared(tmp_path, {0: BASE}, {0: OTHER}, base_first_step=-1, other_first_step=-1)
    assert by_name(answer)[GEMM] == (3, 4, 153, 218, 1, 65)
    (pair,) = answer["ranks"]
    assert pair["base"]["steps"] == 0 and pair["base"]["medianStepUs"] is None
    assert pair["diff"]["medianStepUs"] is None
    assert pair["perStep"] is False


def test_per_rank_differences_per_step_when_the_step_counts_differ(tmp_path: Path) -> None:
    same = compared(tmp_path / "same", {0: BASE}, {0: OTHER})["ranks"][0]
    assert same["perStep"] is False
    base, other, diff = same["base"], same["other"], same["diff"]
    for key, value in diff["temporal"].items():
        assert value == pytest.approx(other["temporal"][key] - base["temporal"][key]), key
    assert diff["medianStepUs"] == other["medianStepUs"] - base["medianStepUs"]
    # BASE's steps: their kernels' µs, 5 µs after each, 20 µs after the last: the median's
    # is step 1's (207), between step 3's (204) and step 2's (216).
    assert base["medianStepUs"] == 167 + 4 * 5 + 20
    shorter = compared(tmp_path / "shorter", {0: BASE}, {0: OTHER[:2]})["ranks"][0]
    assert shorter["perStep"] is True
    whole = compared(tmp_path / "whole", {0: BASE}, {0: BASE})["ranks"][0]
    assert whole["diff"]["temporal"]["kernelTimeUs"] == 0
    kernel_time = whole["base"]["temporal"]["kernelTimeUs"]
    assert shorter["base"]["temporal"]["kernelTimeUs"] == pytest.approx(kernel_time / 3, abs=1e-3)
    assert shorter["base"]["temporal"]["computePct"] == whole["base"]["temporal"]["computePct"]
    mixed = compared(tmp_path / "mixed", {0: BASE}, {0: OTHER}, other_first_step=-1)["ranks"][0]
    assert mixed["perStep"] is False  # a rank without steps has no time per step
    assert mixed["base"]["temporal"]["kernelTimeUs"] == kernel_time


def test_ranks_pair_as_the_contract_says() -> None:
    assert pair_ranks([0, 1, 2, 3], [2, 3, 4]) == [(2, 0), (3, 1)]  # the ranks both hold
    assert pair_ranks([5], [3]) == [(0, 0)]  # one rank each: those two
    assert pair_ranks([None], [None]) == [(0, 0)]
    with pytest.raises(Conflict, match="no rank in common"):
        pair_ranks([0, 1], [2, 3])
    runs = parse_ranks("1-2")
    assert pair_ranks([0, 1, 2], [1, 2, 3], runs) == [(1, 0), (2, 1)]  # one list for both
    assert pair_ranks([0, 1, 2], [5, 6], parse_ranks("0-1"), parse_ranks("5-6")) == [
        (0, 0),
        (1, 1),
    ]
    with pytest.raises(ValidationError, match=r"^otherRanks: no analysed rank"):
        pair_ranks([0, 1], [2, 3], runs, parse_ranks("7"))
    with pytest.raises(ValidationError, match=r"^baseRanks chooses 2 ranks and otherRanks 1"):
        pair_ranks([0, 1], [2, 3], parse_ranks("0-1"), parse_ranks("2"))


def test_several_ranks_add_up_and_each_pair_has_its_row(tmp_path: Path) -> None:
    answer = compared(tmp_path, {0: BASE, 1: BASE, 2: BASE}, {1: OTHER, 2: OTHER, 3: OTHER})
    assert by_name(answer)[GEMM] == (6, 8, 306, 436, 2, 130)
    assert [(r["baseRank"], r["otherRank"]) for r in answer["ranks"]] == [(1, 1), (2, 2)]
    assert answer["base"]["ranks"] == [1, 2]


def test_the_widest_selections_cost_what_the_narrowest_do(tmp_path: Path) -> None:
    base, other = tmp_path / "a", tmp_path / "b"
    base.mkdir()
    other.mkdir()
    write_run(base / "r.json", 0, BASE)
    write_run(other / "r.json", 0, OTHER)
    a, b = sides(base), sides(other)

    def timed(text: str) -> tuple[float, dict[str, Any]]:
        started = time.perf_counter()
        runs = parse_ranks(text, "steps", "step")
        answer = compare_sides(("A", a), ("B", b), runs, runs, runs)
        return time.perf_counter() - started, answer

    assert a and b
    narrow, small = timed("0-1")
    wide, large = timed("0-2147483646")
    with bounded_memory(256) as peak:  # a list of every step or rank would stop it here
        timed("0-2147483646")
    assert large["kernels"] == compared(tmp_path / "all", {0: BASE}, {0: OTHER})["kernels"]
    assert small["kernels"] != large["kernels"]
    assert wide < narrow * 5 + 0.5
    assert peak.mib < 64


def test_compare_local_paths_prints_the_objects_json(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_run(tmp_path / "a" / "rank0.json", 0, BASE)
    write_run(tmp_path / "b" / "rank0.json", 0, OTHER)
    runner = CliRunner()
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    result = runner.invoke(main, ["compare", a, b, "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["added"] == [SOFTMAX] and answer["base"]["traceset"] == a
    assert answer == compared(tmp_path / "again", {0: BASE}, {0: OTHER}) | {
        "base": {"traceset": a, "ranks": [0]},
        "other": {"traceset": b, "ranks": [0]},
    }
    text = runner.invoke(main, ["compare", a, b, "--top", "2"])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert GEMM in lines[3] and "+65.0 µs" in lines[3]  # the slowest change first
    assert f"  added: {SOFTMAX}" in lines and f"  removed: {ADAM}" in lines
    assert "1 added, 1 deleted, 1 increased, 1 decreased, 1 unchanged" in text.stdout


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--steps", "5-2"], "--steps: the range '5-2' ends before it starts"),
        (["--base-ranks", "x"], "--base-ranks: 'x' is not a rank"),
        (["--other-ranks", "4"], "baseRanks: no analysed rank of that traceset is in 4"),
    ],
)
def test_compare_local_paths_names_what_is_wrong(
    tmp_path: Path, words: list[str], message: str
) -> None:
    write_run(tmp_path / "a.json", 0, BASE)
    write_run(tmp_path / "b.json", 0, OTHER)
    result = CliRunner().invoke(
        main, ["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), *words]
    )
    assert result.exit_code in (1, 2)
    assert message in result.output
    assert "Traceback" not in result.output


def test_compare_a_path_with_an_id_is_a_usage_error(tmp_path: Path) -> None:
    write_run(tmp_path / "a.json", 0, BASE)
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "a.json"), "ts_123"])
    assert result.exit_code == 2
    assert "ts_123 is no local file or directory: give two traceset ids or two paths" in (
        result.output
    )
