"""HTA 0.5.0 as the oracle of the per-rank analysis (ANALYTICS.md, "Where HTA is the oracle").

HTA runs once per directory in a process of its own (``tests/support/hta_oracle.py``). Where
ANALYTICS.md says HTA is the oracle (whole-µs times, no stream-bound ``cuda_sync``) the
numbers must be equal: on the repository's real Kineto samples, and on synthetic ranks that
cover both NCCL kernel namings, memcpy and memset, overlap of every kind, several streams,
kernels launched after the last step or with no launch in the file, one and several steps.
Elsewhere each test asserts the documented difference (docs/analysis.md).
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support import hta_oracle
from tests.support.kineto_traces import TraceBuilder
from tracestore.analysis import AnalysedRank, analyze_path, traceset_json

pytestmark = pytest.mark.slow
SAMPLES = Path(__file__).with_name("data") / "kineto-dlrm-8ranks"
GEMM = "void gemm_kernel<float, 128>(float const*, float*, int)"
RELU = "relu_kernel(float*, int)"
ALL_REDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
ALL_GATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def hta(directory: Path) -> dict[str, Any]:
    """HTA's numbers for ``directory`` (a bounded child process)."""
    return hta_oracle.ask(str(directory))


def ours(directory: Path) -> dict[int, AnalysedRank]:
    """Our analysis of each file of ``directory``, by rank."""
    found = {}
    for path in sorted(directory.iterdir()):
        outcome = analyze_path(path, path.name)
        assert outcome.rank is not None, outcome.reason
        assert outcome.rank.rank is not None
        found[outcome.rank.rank] = outcome.rank
    return found


def assert_equal_to_hta(
    mine: AnalysedRank, theirs: dict[str, Any], moves: Counter[tuple[int, str]] | None = None
) -> None:
    """Every number ANALYTICS.md holds equal to HTA's, for one rank; ``moves`` is the idle
    time HTA files elsewhere on purpose (``hta_orphan_moves``)."""
    data = mine.analysis.to_json(kernel_rows=None)
    for key, value in theirs["temporal"].items():
        assert data["temporal"][key] == pytest.approx(value), key
    assert data["overlap"]["pct"] == theirs["overlapPct"]
    kernels = {(row["kind"], row["name"]): row for row in data["kernels"]}
    assert set(kernels) == {(row["kind"], row["name"]) for row in theirs["kernels"]}
    for row in theirs["kernels"]:
        mine_row = kernels[(row["kind"], row["name"])]
        for key in ("sumUs", "maxUs", "minUs", "meanUs", "stddevUs"):
            assert mine_row[key] == pytest.approx(row[key], rel=1e-9, abs=1e-9), key
    expected = Counter(idle_times(data["idle"]))
    expected.update(moves or Counter())
    assert {key: value for key, value in expected.items() if value} == idle_times(theirs["idle"])
    if not moves:
        ratios = {(r["stream"], r["category"]): r["ratio"] for r in theirs["idle"]}
        for row in data["idle"]:
            assert row["ratio"] == ratios[(row["stream"], row["category"])]


def hta_orphan_moves(path: Path) -> Counter[tuple[int, str]]:
    """The gaps HTA calls ``host_wait`` on purpose of ours: before a device event whose
    launch is not in the file, HTA takes the time of the file's first row for its launch
    (ANALYTICS.md), so such a gap is host_wait when that row starts after the gap opens.
    Read from the raw JSON of a small sample."""
    events = json.loads(path.read_text())["traceEvents"]
    first = events[0]
    row_ts = first["ts"] if "dur" in first and "cat" in first else None
    launched = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    streams: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "stream" in e.get("args", {}):
            streams.setdefault(e["args"]["stream"], []).append(e)
    moves: Counter[tuple[int, str]] = Counter()
    for stream, kernels in streams.items():
        kernels.sort(key=lambda e: e["ts"])
        for before, kernel in itertools.pairwise(kernels):
            before_end = before["ts"] + before["dur"]
            if kernel["args"]["correlation"] in launched or row_ts is None or row_ts <= before_end:
                continue
            gap = kernel["ts"] - before_end
            moves[(stream, "kernel_wait" if gap < 30 else "other")] -= gap
            moves[(stream, "host_wait")] += gap
    return moves


def idle_times(rows: list[dict[str, Any]]) -> dict[tuple[int, str], float]:
    """Idle time by (stream, category), zeros left out (HTA lists the category of each
    stream's first event, which has no gap before it, with 0)."""
    return {(r["stream"], r["category"]): r["idleTimeUs"] for r in rows if r["idleTimeUs"]}


def assert_kinds_equal(mine: dict[int, AnalysedRank], theirs: dict[str, float]) -> None:
    """HTA's kind breakdown sums over the ranks it is given: so does this."""
    summed: dict[str, float] = {}
    for rank in mine.values():
        for label, value in rank.analysis.to_json()["kindBreakdown"].items():
            summed[label] = summed.get(label, 0) + value
    assert summed == {label: value for label, value in theirs.items() if value}


# --- synthetic ranks ---------------------------------------------------------------------


def every_rule(rank: int) -> TraceBuilder:
    """Three steps; compute on one stream, both NCCL namings on another, memcpy and memset
    on a third; pieces of every kind combination; gaps of each cause; a kernel whose launch
    is not in the file, one launched in the last step that runs past its end."""
    t = TraceBuilder(rank, world=4)
    t.step(1, 1000, 400)
    t.step(2, 1400, 400)
    t.step(3, 1800, 400)
    t.device(GEMM, 1010, 50, stream=7, launch=1005)
    t.device(RELU, 1065, 10, stream=7, launch=1008)  # 5 µs after the last: kernel_wait
    t.device(GEMM, 1150, 60, stream=7, launch=1140)  # launched after the last ended: host_wait
    t.device(RELU, 1260, 20, stream=7, launch=1100)  # 50 µs, launched before: other
    t.device(ALL_REDUCE, 1030, 100, stream=20, launch=1020)
    t.device(ALL_GATHER, 1300, 40, stream=20, launch=1200)
    t.memcpy(1040, 10, stream=22, launch=1030)  # under compute and communication
    t.memcpy(1120, 15, stream=22, launch=1110)  # under communication only
    t.memset(1160, 5, stream=22, launch=1150)  # under compute only
    t.memset(1350, 8, stream=22, launch=1345)  # alone
    t.device(GEMM, 1450, 55, stream=7, launch=1440)
    t.device(RELU, 1512, 12, stream=7, launch=1445)
    t.device(ALL_REDUCE, 1480, 90, stream=20, launch=1470)
    t.device(GEMM, 1600, 10, stream=8, launch_in_file=False)  # no launch: not counted
    t.device(GEMM, 1850, 70, stream=7, launch=1845)
    t.device(ALL_REDUCE, 1900, 80, stream=20, launch=1890)
    t.device(RELU, 2205, 30, stream=7, launch=2190)  # launched in step 3, runs past it
    t.host("aten::mm", 2250, 20)
    return t


def busy(rank: int, seed: int, steps: int = 4) -> TraceBuilder:
    """Several steps of kernels on two compute streams, one communication stream and one
    copy stream, with random whole-µs gaps and launches sometimes late, sometimes early."""
    rng = random.Random(seed)
    t = TraceBuilder(rank, world=4)
    now = 10_000
    names = [GEMM, RELU, "softmax_kernel", "layer_norm_kernel", "adam_kernel"]
    for step in range(1, steps + 1):
        step_start = now
        ends = {7: now, 8: now, 20: now, 22: now}
        for _ in range(30):
            stream = rng.choice([7, 7, 8, 20, 22])
            start = ends[stream] + rng.choice([0, 1, 3, 10, 29, 30, 31, 80, 200])
            dur = rng.randint(1, 120)
            launch = start - rng.randint(-40, 60)
            launch = max(step_start + 1, launch)
            if stream == 20:
                t.device(rng.choice([ALL_REDUCE, ALL_GATHER]), start, dur, stream=20, launch=launch)
            elif stream == 22:
                (t.memcpy if rng.random() < 0.7 else t.memset)(start, dur, stream=22, launch=launch)
            else:
                t.device(rng.choice(names), start, dur, stream=stream, launch=launch)
            ends[stream] = start + dur
        now = max(ends.values()) + 50
        t.step(step, step_start, now - step_start - 20)
    return t


def tail(rank: int) -> TraceBuilder:
    """A kernel launched after the last step: the profiler's tail, which we leave out. HTA
    0.5.0 means to (``include_last_profiler_step=True``) but keeps it: it compares the
    launches' times, shifted to the traceset's first event, with the last step's end,
    which it does not shift (``Trace._align_all_ranks`` moves ``ts``, not ``end``)."""
    t = TraceBuilder(rank, world=4)
    t.step(1, 100, 100)
    t.step(2, 200, 100)
    t.device(GEMM, 120, 30, launch=110)
    t.device(GEMM, 220, 30, launch=210)
    t.device(RELU, 330, 30, launch=320)  # launched after the last step (ends at 300)
    return t


@pytest.fixture(scope="module")
def several_steps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    directory = tmp_path_factory.mktemp("several-steps")
    every_rule(0).write(directory / "rank0.json")
    busy(1, seed=1).write(directory / "rank1.json")
    busy(2, seed=2).write(directory / "rank2.json")
    tail(3).write(directory / "rank3.json")
    return directory, hta(directory)


def test_the_real_samples_equal_hta() -> None:
    theirs = hta(SAMPLES)
    mine = ours(SAMPLES)
    assert sorted(mine) == sorted(int(rank) for rank in theirs["ranks"]) == list(range(8))
    moved = 0
    for rank, analysed in mine.items():
        moves = hta_orphan_moves(SAMPLES / analysed.file)
        moved += moves[(7, "host_wait")]
        assert_equal_to_hta(analysed, theirs["ranks"][str(rank)], moves)
    assert moved > 0  # the samples do hold kernels launched outside the file
    assert_kinds_equal(mine, theirs["kinds"])


def test_synthetic_ranks_of_several_steps_equal_hta(
    several_steps: tuple[Path, dict[str, Any]],
) -> None:
    directory, theirs = several_steps
    mine = ours(directory)
    for rank in (0, 1, 2):
        assert_equal_to_hta(mine[rank], theirs["ranks"][str(rank)])
    # Rank 3's kernel launched after the last step is HTA's (below): 30 µs of computation.
    kinds = dict(theirs["kinds"])
    kinds["COMPUTATION"] -= 30
    assert_kinds_equal(mine, kinds)


def test_every_rule_rank_has_what_its_rules_say(
    several_steps: tuple[Path, dict[str, Any]],
) -> None:
    directory, _ = several_steps
    data = ours(directory)[0].analysis.to_json(kernel_rows=None)
    labels = set(data["kindBreakdown"])
    assert labels == {
        "COMPUTATION",
        "COMMUNICATION",
        "MEMORY",
        "COMPUTATION overlapping COMMUNICATION",
        "COMPUTATION overlapping MEMORY",
        "COMMUNICATION overlapping MEMORY",
        "COMPUTATION overlapping COMMUNICATION overlapping MEMORY",
    }
    kinds = {row["name"]: row["kind"] for row in data["kernels"]}
    assert kinds[ALL_REDUCE] == kinds[ALL_GATHER] == "COMMUNICATION"
    assert kinds["Memset (Device)"] == "MEMORY"
    # Counted: the GEMMs at 1010, 1150, 1450 and 1850; not the one without a launch in the
    # file, nor the one launched after the last step.
    assert {row["name"]: row["count"] for row in data["kernels"]}[GEMM] == 4
    steps = data["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[2]["endUs"] == 2235  # widened to the end of the kernel it launched
    assert steps[2]["durationUs"] == 435
    assert steps[0]["computeUs"] == 50 + 10 + 60 + 20
    assert steps[0]["communicationUs"] == 100 + 40
    assert steps[0]["overlapUs"] == (1060 - 1030) + (1075 - 1065)
    # Busy: [1010, 1135), [1150, 1210), [1260, 1280), [1300, 1340), [1350, 1358).
    assert steps[0]["idleUs"] == 400 - (125 + 60 + 20 + 40 + 8)


def test_a_kernel_launched_after_the_last_step_is_left_out_here_not_by_hta(
    several_steps: tuple[Path, dict[str, Any]],
) -> None:
    directory, theirs = several_steps
    mine = ours(directory)[3].analysis
    assert [(row.name, row.count) for row in mine.kernels] == [(GEMM, 2)]
    assert mine.temporal.kernel_ns == 130_000  # [120, 250)
    theirs_kernels = {row["name"]: row["sumUs"] for row in theirs["ranks"]["3"]["kernels"]}
    assert theirs_kernels == {GEMM: 60, RELU: 30}
    assert theirs["ranks"]["3"]["temporal"]["kernelTimeUs"] == 240  # [120, 360)


def test_one_step_or_none_counts_every_kernel_like_hta(tmp_path: Path) -> None:
    one = TraceBuilder(0, world=2)
    one.step(5, 100, 200)
    one.device(GEMM, 110, 40, launch=105)
    one.device(ALL_REDUCE, 130, 60, stream=20, launch=120)
    one.device(RELU, 400, 20, launch=350)  # launched after the only step: still counted
    one.memcpy(160, 10, stream=22, launch=150)
    one.write(tmp_path / "one.json")
    none = TraceBuilder(1, world=2)
    none.device(GEMM, 1000, 40, launch=990)
    none.device(RELU, 1045, 5, launch=1000)
    none.device(RELU, 1100, 5, launch=1080)
    none.write(tmp_path / "none.json", compression="gzip")
    (tmp_path / "none.json").rename(tmp_path / "none.json.gz")
    theirs = hta(tmp_path)
    mine = ours(tmp_path)
    for rank in (0, 1):
        assert_equal_to_hta(mine[rank], theirs["ranks"][str(rank)])
    assert_kinds_equal(mine, theirs["kinds"])
    assert {r.name: r.count for r in mine[0].analysis.kernels}[RELU] == 1


# --- where we differ on purpose ----------------------------------------------------------


@pytest.fixture(scope="module")
def differences(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Ranks that show each documented difference (at most one step name in the whole
    directory: HTA decides whether to drop a tail over every rank's names at once)."""
    directory = tmp_path_factory.mktemp("differences")
    fractional = TraceBuilder(0, world=4)
    fractional.device(GEMM, 100.6, 0.3, launch=99.2)  # HTA: ceil 101, floor 100.9: -1 µs
    fractional.device(GEMM, 102.25, 10.5, launch=100.5)
    fractional.device(RELU, 140.125, 2.75, launch=139.5)
    fractional.write(directory / "fractional.json")
    sync = TraceBuilder(1, world=4)
    sync.device(GEMM, 100, 50, launch=90)
    sync.stream_sync(150, 50, stream=7)
    sync.device(GEMM, 220, 20, launch=210)
    sync.write(directory / "sync.json")
    orphan = TraceBuilder(2, world=4)
    orphan.host("aten::empty", 5000, 1)  # the file's first row: HTA's stand-in launch time
    orphan.device(GEMM, 100, 50, launch=90)
    orphan.device(RELU, 300, 20, launch_in_file=False)
    orphan.write(directory / "orphan.json")
    kinds = TraceBuilder(3, world=4)
    kinds.device("rcclKernel_AllReduce_RING_LL_Sum_float", 100, 50, stream=20, launch=90)
    kinds.device(
        "custom_allreduce_kernel",
        200,
        40,
        stream=20,
        launch=190,
        args={"Collective name": "allreduce", "Process Group Name": "7", "Seq": 3},
    )
    kinds.device(GEMM, 120, 100, launch=110)
    kinds.write(directory / "kinds.json")
    return directory, hta(directory)


def test_fractional_times_kept_where_hta_rounds_them(
    differences: tuple[Path, dict[str, Any]],
) -> None:
    directory, theirs = differences
    mine = ours(directory)[0].analysis
    gemm = next(row for row in mine.kernels if row.name == GEMM)
    assert (gemm.count, gemm.sum_ns, gemm.min_ns, gemm.max_ns) == (2, 10_800, 300, 10_500)
    assert mine.temporal.kernel_ns == 142_875 - 100_600
    assert mine.temporal.compute_ns == 300 + 10_500 + 2_750
    hta_gemm = next(row for row in theirs["ranks"]["0"]["kernels"] if row["name"] == GEMM)
    # HTA: [ceil(ts), floor(ts + dur)): 100.6+0.3 -> [101, 100] (-1), 102.25+10.5 -> [103, 112]
    assert (hta_gemm["minUs"], hta_gemm["maxUs"], hta_gemm["sumUs"]) == (-1, 9, 8)


def test_a_stream_bound_sync_is_not_busy_time_here_but_is_in_hta(
    differences: tuple[Path, dict[str, Any]],
) -> None:
    directory, theirs = differences
    mine = ours(directory)[1].analysis.temporal
    assert (mine.kernel_ns, mine.idle_ns, mine.compute_ns) == (140_000, 70_000, 70_000)
    hta_temporal = theirs["ranks"]["1"]["temporal"]
    # HTA unions the sync [150, 200) into the busy time, as non-compute time.
    assert hta_temporal["idleTimeUs"] == 20
    assert hta_temporal["nonComputeTimeUs"] == 50
    assert hta_temporal["computeTimeUs"] == 70


def test_a_kernel_without_launch_is_no_host_wait_here_but_is_in_hta(
    differences: tuple[Path, dict[str, Any]],
) -> None:
    directory, theirs = differences
    mine = idle_times(ours(directory)[2].analysis.to_json()["idle"])
    assert mine == {(7, "other"): 150}
    assert idle_times(theirs["ranks"]["2"]["idle"]) == {(7, "host_wait"): 150}


def test_rccl_and_named_collectives_are_communication_here_not_in_hta(
    differences: tuple[Path, dict[str, Any]],
) -> None:
    directory, theirs = differences
    mine = ours(directory)[3].analysis
    assert {row.name: row.kind for row in mine.kernels} == {
        "rcclKernel_AllReduce_RING_LL_Sum_float": "COMMUNICATION",
        "custom_allreduce_kernel": "COMMUNICATION",
        GEMM: "COMPUTATION",
    }
    assert {row["name"]: row["kind"] for row in theirs["ranks"]["3"]["kernels"]} == {
        "rcclKernel_AllReduce_RING_LL_Sum_float": "COMPUTATION",
        "custom_allreduce_kernel": "COMPUTATION",
        GEMM: "COMPUTATION",
    }
    collective = next(c for c in mine.collectives if c.name == "custom_allreduce_kernel")
    assert (collective.process_group, collective.sequence) == ("7", 3)
    assert mine.overlap.pct is not None and theirs["ranks"]["3"]["overlapPct"] is None


def test_the_rank_comes_from_the_inspection_where_htas_pattern_misses_it(
    tmp_path: Path,
) -> None:
    trace = TraceBuilder(3, world=8)
    trace.device(GEMM, 100, 10)
    text = trace.write(tmp_path / "tight.json").read_text().replace('"rank": 3', '"rank":3')
    (tmp_path / "tight.json").write_text(text)
    from hta.common.trace_file import create_rank_to_trace_dict

    assert analyze_path(tmp_path / "tight.json").rank.rank == 3  # type: ignore[union-attr]
    assert create_rank_to_trace_dict([str(tmp_path / "tight.json")])[1] == {
        0: str(tmp_path / "tight.json")
    }


def test_the_summary_is_over_the_ranks_of_the_samples() -> None:
    mine = ours(SAMPLES)
    summary = traceset_json(list(mine.values()))["summary"]
    idle = sorted(r.analysis.temporal.to_json()["idlePct"] for r in mine.values())
    assert summary["idlePct"] == {
        "median": round((idle[3] + idle[4]) / 2, 2),
        "min": idle[0],
        "max": idle[-1],
    }
    assert summary["rankCount"] == 8
    assert not math.isnan(summary["stepTimeUs"]["median"])
