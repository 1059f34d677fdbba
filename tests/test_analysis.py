"""The per-rank analysis without HTA: its readings of the bytes, bad input, spilling sorts,
limits, steps, kernel rows and the traceset summary (tests/test_analysis_hta.py holds it to
HTA's numbers)."""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.kineto_traces import TraceBuilder, pytorch_json
from tracestore.analysis import (
    AnalysedRank,
    KinetoEvents,
    Limits,
    RankAnalysis,
    RankCollector,
    analyze_path,
    summary,
)
from tracestore.analysis.extsort import MIN_RUN, RecordSort
from tracestore.analysis.kineto_events import ns
from tracestore.analysis.model import KernelStats, fold_kernels
from tracestore.inspect.model import InspectionError

GEMM = "void gemm_kernel<float>(float*, int)"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
TESTDATA = Path(__file__).with_name("data")


def analysis_of(data: bytes, limits: Limits | None = None, chunk: int = 4096) -> RankAnalysis:
    """The analysis of a document's bytes fed in ``chunk``-sized windows."""
    collector = RankCollector(limits)
    events = KinetoEvents(collector)
    for offset in range(0, len(data), chunk):
        piece = data[offset : offset + chunk]
        events.feed(piece, len(piece))
    events.close()
    return collector.finish()


def training(rank: int = 0, steps: int = 3, kernels: int = 40, seed: int = 7) -> TraceBuilder:
    """A few steps of compute, communication and copies with fractional-µs times."""
    rng = random.Random(seed)
    t = TraceBuilder(rank, world=2)
    now = 5_000.0
    for step in range(1, steps + 1):
        start = now
        ends = {7: now, 20: now, 22: now}
        for _ in range(kernels):
            stream = rng.choice([7, 7, 20, 22])
            ts = round(ends[stream] + rng.choice([0.5, 2.25, 31.125, 70.0]), 3)
            dur = round(rng.uniform(0.5, 60), 3)
            launch = round(max(start + 0.5, ts - rng.uniform(-20, 40)), 3)
            if stream == 20:
                t.device(
                    ALL_REDUCE,
                    ts,
                    dur,
                    stream=20,
                    launch=launch,
                    args={"Process Group Name": "0", "Seq": step},
                )
            elif stream == 22:
                t.memcpy(ts, dur, stream=22, launch=launch)
            else:
                t.device(rng.choice([GEMM, "relu_kernel", "softmax"]), ts, dur, launch=launch)
            ends[stream] = ts + dur
        now = max(ends.values()) + 10
        t.step(step, start, now - start - 5)
    return t


def as_json(analysis: RankAnalysis) -> dict[str, Any]:
    return analysis.to_json(kernel_rows=None)


# --- reading the bytes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (b"12", 12_000),
        (b"-3", -3_000),
        (b"5093617.123", 5_093_617_123),
        (b"0.5", 500),
        (b"1.0005", 1_001),
        (b"1.0004", 1_000),
        (b"-2.25", -2_250),
        (b"1694128201428473.125", 1_694_128_201_428_473_125),
        (b"1.5e3", 1_500_000),
    ],
)
def test_times_are_exact_integer_nanoseconds(text: bytes, value: int) -> None:
    assert ns(text) == value


def test_a_time_that_is_no_number_is_refused() -> None:
    with pytest.raises(ValueError):
        ns(b"-")


def test_the_fast_reading_and_the_exact_one_agree() -> None:
    trace = training()
    fast, exact = RankCollector(), RankCollector()
    fast_events, exact_events = KinetoEvents(fast), KinetoEvents(exact)
    pytorch = pytorch_json(trace.trace()).encode()
    compact = json.dumps(
        {**trace.trace(), "traceEvents": [dict(sorted(e.items())) for e in trace.events]}
    ).encode()
    for events, data in ((fast_events, pytorch), (exact_events, compact)):
        for offset in range(0, len(data), 1000):
            events.feed(data[offset : offset + 1000], len(data[offset : offset + 1000]))
        events.close()
    assert fast_events.exact_regions == 0
    assert exact_events.exact_regions > 0
    assert as_json(fast.finish()) == as_json(exact.finish())


@pytest.mark.parametrize("chunk", [97, 1000, 1 << 20])
def test_the_answer_does_not_depend_on_where_the_windows_cut(chunk: int) -> None:
    data = pytorch_json(training().trace()).encode()
    assert as_json(analysis_of(data, chunk=chunk)) == as_json(analysis_of(data, chunk=len(data)))


def test_a_bare_event_list_and_members_after_the_events_are_read(tmp_path: Path) -> None:
    trace = training(steps=2, kernels=10)
    whole = as_json(analysis_of(pytorch_json(trace.trace()).encode()))
    bare = json.dumps(trace.events).encode()
    assert as_json(analysis_of(bare)) == whole
    after = json.dumps({"traceEvents": trace.events, "distributedInfo": {"rank": 0}}).encode()
    assert as_json(analysis_of(after)) == whole


def test_a_name_with_escapes_is_read_exactly() -> None:
    trace = TraceBuilder()
    trace.device('kernel<"quoted">\\path é', 10, 5)
    trace.device(GEMM, 20, 5)
    analysis = analysis_of(pytorch_json(trace.trace()).encode())
    assert {row.name for row in analysis.kernels} == {'kernel<"quoted">\\path é', GEMM}


def test_only_complete_device_events_with_a_stream_count() -> None:
    trace = TraceBuilder()
    trace.device(GEMM, 10, 5)
    trace.stream_sync(15, 5)
    trace.host("ProfilerStep#1", 0, 100, cat="gpu_user_annotation")  # not a host step
    doc = trace.trace()
    doc["traceEvents"] += [
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 30, "s": "t"},
        {"ph": "X", "cat": "kernel", "name": "no stream", "ts": 40, "dur": 2, "args": {}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "annotation", "ts": 0, "dur": 90},
    ]
    analysis = analysis_of(pytorch_json(doc).encode())
    assert [row.name for row in analysis.kernels] == [GEMM]
    assert analysis.steps == []
    assert analysis.temporal.kernel_ns == 5_000


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_compressed_files_answer_as_the_plain_one(tmp_path: Path, compression: Any) -> None:
    trace = training()
    plain = analyze_path(trace.write(tmp_path / "plain.json"))
    packed = analyze_path(trace.write(tmp_path / "packed.bin", compression=compression))
    assert plain.rank is not None and packed.rank is not None
    assert packed.rank.to_json() == {**plain.rank.to_json(), "file": str(tmp_path / "packed.bin")}


# --- bad input ---------------------------------------------------------------------------


def reason_for(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    outcome = analyze_path(path)
    assert outcome.rank is None
    assert outcome.reason
    return outcome.reason


def test_bad_files_get_a_reason_each(tmp_path: Path) -> None:
    whole = pytorch_json(training(steps=2, kernels=10).trace()).encode()
    assert "not a Kineto trace" in reason_for(tmp_path, "notes.txt", b"hello, world\n")
    et = (TESTDATA / "pytorch-et-resnet50-ddp-2ranks" / "eg.rank_0.pt.trace.json").read_bytes()
    assert reason_for(tmp_path, "et.json", et) == "not a Kineto trace (read as pytorch_et_json)"
    middle = whole.index(b'"cat": "kernel"') + 30
    assert "truncated" in reason_for(tmp_path, "mid-event.json", whole[:middle])
    boundary = whole.rindex(b"},\n  {") + 2
    assert "truncated" in reason_for(tmp_path, "at-boundary.json", whole[:boundary])
    assert "truncated" in reason_for(tmp_path, "no-close.json", whole.rstrip()[:-1])
    bad = whole.replace(b'"dur": 5', b'"dur": }', 1)
    garbage = reason_for(tmp_path, "garbage.json", bad.replace(b'"ts": ', b'"ts": x', 1))
    assert garbage.startswith("malformed JSON at byte ")
    assert reason_for(tmp_path, "cut.json.gz", gzip.compress(whole)[:-200]) == (
        "truncated: the gzip stream ends before its end marker"
    )
    assert "traceEvents" in reason_for(tmp_path, "no-events.json", b'{"schemaVersion": 1}')


def test_a_broken_event_in_the_middle_is_malformed_json(tmp_path: Path) -> None:
    whole = pytorch_json(training(steps=2, kernels=10).trace()).encode()
    at = whole.index(b'"cat": "kernel"')
    broken = whole[:at] + b'"cat": "kernel", "name": ] ' + whole[at + 15 :]
    assert reason_for(tmp_path, "broken.json", broken).startswith("malformed JSON at byte ")


# --- sorting in bounded memory -----------------------------------------------------------


def test_records_come_out_sorted_ties_in_the_order_added_whether_or_not_they_spill() -> None:
    rng = random.Random(3)
    records = [(rng.randint(0, 50), rng.randint(0, 3), i) for i in range(10 * MIN_RUN)]
    expected = sorted(records, key=lambda r: (r[0], r[1]))  # stable: ties by index
    with RecordSort(3, 2, memory=1) as small, RecordSort(3, 2, memory=1 << 30) as large:
        for record in records:
            small.add(record)
        large.add_columns([[r[k] for r in records] for k in range(3)])
        assert small.spilled and not large.spilled
        assert list(small.rows()) == list(large.rows()) == expected


def test_a_spilling_analysis_answers_as_one_in_memory() -> None:
    data = pytorch_json(training(steps=4, kernels=800).trace()).encode()
    tiny = RankCollector(Limits(sort_memory=1))
    events = KinetoEvents(tiny)
    events.feed(data, len(data))
    events.close()
    spilled = tiny.finish()
    assert tiny.spilled
    assert as_json(spilled) == as_json(analysis_of(data))
    assert spilled.step_kernels and spilled.collectives


def test_limits_fail_the_analysis_with_their_name(tmp_path: Path) -> None:
    trace = training(steps=3, kernels=5)
    path = trace.write(tmp_path / "t.json")
    reason = analyze_path(path, limits=Limits(steps=2)).reason
    assert reason == "more than 2 ProfilerStep events"
    reason = analyze_path(path, limits=Limits(name_bytes=200)).reason
    assert reason is not None and "distinct kernel names take more than 200 bytes" in reason


# --- the numbers -------------------------------------------------------------------------


def test_steps_their_windows_kernel_totals_and_a_truncated_last_step() -> None:
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.step(2, 100, 100)
    t.step(3, 200, 100)
    for step in range(3):
        base = step * 100
        count = 5 if step < 2 else 3  # the profiler stopped inside step 3
        for i in range(count):
            t.device(GEMM, base + 10 + i * 10, 5, launch=base + 2 + i)
    t.device(ALL_REDUCE, 150, 55, stream=20, launch=140)  # step 2's, running past its end
    analysis = analysis_of(pytorch_json(t.trace()).encode())
    steps = as_json(analysis)["steps"]
    assert [(s["step"], s["startUs"], s["endUs"], s["truncated"]) for s in steps] == [
        (1, 0, 100, False),
        (2, 100, 205, False),
        (3, 200, 300, True),
    ]
    assert steps[1]["communicationUs"] == 55
    assert steps[1]["overlapUs"] == 5  # [150, 155) of the GEMM at 150
    assert steps[1]["computeUs"] == 25
    assert steps[1]["idleUs"] == 105 - (25 + 55 - 5)
    # The median step time leaves the truncated step out: median of 100 and 105.
    assert analysis.median_step_ns == 102_500
    totals = {(k.step, k.name): (k.count, k.duration_ns) for k in analysis.step_kernels}
    assert totals == {
        (1, GEMM): (5, 25_000),
        (2, GEMM): (5, 25_000),
        (2, ALL_REDUCE): (1, 55_000),
        (3, GEMM): (3, 15_000),
    }


def test_collectives_in_start_order_with_their_group_and_sequence() -> None:
    t = TraceBuilder()
    t.device(ALL_REDUCE, 300, 10, stream=20, args={"Process Group Name": "1", "Seq": 2})
    t.device(ALL_REDUCE, 100, 10, stream=20, args={"Process Group Name": "1", "Seq": 1})
    t.device("ncclKernel_Broadcast_RING_LL_Sum_int8_t", 200, 5, stream=21)
    analysis = analysis_of(pytorch_json(t.trace()).encode())
    assert [(c.start_ns, c.process_group, c.sequence) for c in analysis.collectives] == [
        (100_000, "1", 1),
        (200_000, None, None),
        (300_000, "1", 2),
    ]


def test_a_negative_duration_counts_as_none() -> None:
    t = TraceBuilder()
    t.device(GEMM, 100, -5)
    t.device(GEMM, 120, 10)
    analysis = analysis_of(pytorch_json(t.trace()).encode())
    assert (analysis.kernels[0].min_ns, analysis.temporal.kernel_ns) == (0, 30_000)


def test_kernel_rows_past_the_hundredth_fold_into_others_exactly() -> None:
    rows = []
    for i in range(150):
        row = KernelStats(f"k{i}", "COMPUTATION")
        for duration in (1_000 * (i + 1), 2_000 * (i + 1)):
            row.add(duration)
        rows.append(row)
    folded = fold_kernels(rows, 100)
    assert [r.name for r in folded[:100]] == [f"k{i}" for i in range(100)]
    others = folded[100]
    durations = [d for i in range(100, 150) for d in (1_000 * (i + 1), 2_000 * (i + 1))]
    mean = sum(durations) / len(durations)
    variance = sum((d - mean) ** 2 for d in durations) / (len(durations) - 1)
    data = others.to_json()
    assert (data["name"], data["kind"], data["count"]) == ("others", "COMPUTATION", 100)
    assert data["stddevUs"] == pytest.approx(variance**0.5 / 1000, rel=1e-12)
    assert (data["minUs"], data["maxUs"]) == (101, 300)


def test_the_summary_takes_medians_and_names_the_slowest_and_fastest_rank() -> None:
    def rank(number: int, step_us: int, idle: int) -> AnalysedRank:
        t = TraceBuilder(number)
        for step in range(1, 4):
            start = step * 1000
            t.step(step, start, step_us)
            t.device(GEMM, start + 10, 100 - idle, launch=start + 1)
            t.device(GEMM, start + 110, 10, launch=start + 2)
        return AnalysedRank(number, f"r{number}", analysis_of(pytorch_json(t.trace()).encode()))

    ranks = [rank(0, 300, 10), rank(1, 500, 30), rank(2, 400, 20), rank(3, 200, 0)]
    result = summary(ranks)
    assert result["rankCount"] == 4
    assert result["stepTimeUs"] == {"median": 350.0, "min": 200, "max": 500}
    assert (result["slowestRank"], result["fastestRank"]) == (1, 3)
    assert result["overlapPct"] == {"median": None, "min": None, "max": None}
    # Rank 3 computes 110 µs a step against the median rank's 95: a straggler by that alone.
    assert [(s["rank"], s["computeRatio"], s["lastArrivals"]) for s in result["stragglers"]] == [
        (3, 1.16, 0)
    ]
    assert result["stragglers"][0]["reason"] == "rank 3 computes 1.16 × the median rank per step"
    assert result["collectiveMatching"]["matched"] == 0
    assert result["collectiveMatching"]["arrivalsBy"] is None


def test_the_analysis_imports_nothing_of_the_server_or_the_client() -> None:
    code = (
        "import sys, tracestore.analysis\n"
        "heavy = {'fastapi', 'sqlalchemy', 'boto3', 'uvicorn', 'httpx'}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
        "                or m.startswith(('tracestore.server', 'tracestore.client')))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_inspect_loads_its_exports_on_first_use() -> None:
    # A fresh `tracestore analyze` must not pay for the census's imports (pydantic through
    # metadata): inspect's package exports load when first used.
    code = (
        "import sys, tracestore.analysis\n"
        "assert 'pydantic' not in sys.modules, 'pydantic'\n"
        "assert 'tracestore.inspect.census' not in sys.modules, 'census'\n"
        "from tracestore.inspect import rank_census, FileInspection\n"
        "import tracestore.inspect as inspect\n"
        "assert inspect.validation_checks.__module__ == 'tracestore.inspect.census'\n"
        "try:\n"
        "    inspect.nothing\n"
        "except AttributeError as exc:\n"
        "    assert 'nothing' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_windows_of_inspections_scan_feed_the_analysis_as_well() -> None:
    # Inspection's pass (inspect.jsonscan.ChunkedScan) can hand its windows over: the same
    # bytes read once for both.
    import io

    from tracestore.inspect.jsonscan import ChunkedScan
    from tracestore.inspect.model import Draft

    data = pytorch_json(training().trace()).encode()
    collector = RankCollector()
    events = KinetoEvents(collector)
    for window in ChunkedScan(io.BytesIO(data), Draft(name="t"), chunk_size=3000):
        events.feed(window.buf, window.end)
    events.close()
    assert as_json(collector.finish()) == as_json(analysis_of(data))


def test_inspection_hands_its_pass_to_the_analysis_once_through_tap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The service reads a stored Kineto trace once: inspect_file(..., tap=RankTap) gives the
    # analysis every byte, once and in order, even where inspection holds a window back for
    # a distributedInfo that runs past it (tiny windows force that here).
    import functools

    from tracestore.analysis import RankTap
    from tracestore.inspect import kineto
    from tracestore.inspect.files import inspect_file
    from tracestore.inspect.jsonscan import ChunkedScan

    document = training(rank=3, steps=3, kernels=60).trace()
    info = document.pop("distributedInfo")
    info["pg_config"] = [  # nested objects: the scan holds it back, and events before it
        {"pg_name": str(group), "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}
        for group in range(5)
    ]
    # After the events, as writers other than PyTorch put it.
    after = f'\n  ],\n  "distributedInfo": {json.dumps(info)},\n  "traceName"'
    text = pytorch_json(document).replace('\n  ],\n  "traceName"', after).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text))
    expected = as_json(analysis_of(text))
    held: list[bool] = []
    hand_on = kineto._hand_on

    def spied(tap: Any, window: Any, had: int) -> int:
        held.append(had > window.offset)
        return hand_on(tap, window, had)

    monkeypatch.setattr(kineto, "_hand_on", spied)
    for chunk in (None, 97):
        if chunk is not None:
            monkeypatch.setattr(
                kineto, "ChunkedScan", functools.partial(ChunkedScan, chunk_size=chunk)
            )
        tap = RankTap()
        found = inspect_file(lambda: path.open("rb"), "t.json.gz", tap=tap)
        assert found.status == "complete" and found.rank == 3
        analysis, reason = tap.finish()
        assert reason is None and analysis is not None
        assert as_json(analysis) == expected
    assert any(held)  # a window came round again


def test_a_kernel_name_with_a_lone_surrogate_is_stored_as_a_replacement_character() -> None:
    # JSON's \ud800 escape is valid JSON but no Unicode text: the service could not store a
    # rank whose kernel row held it (PostgreSQL, UTF-8), as inspection could not (ad9731e).
    t = TraceBuilder()
    t.device("gemm\\ud800", 10, 5)
    data = pytorch_json(t.trace()).encode().replace(b"gemm\\\\ud800", b"gemm\\ud800")
    assert b"gemm\\ud800" in data
    (row,) = analysis_of(data).kernels
    assert row.name == "gemm\ufffd"
    json.dumps(as_json(analysis_of(data)), ensure_ascii=False).encode()  # UTF-8 can hold it


@pytest.mark.parametrize("layout", ["pytorch", "compact"])
def test_a_time_beyond_64_bits_fails_the_file_with_a_reason(tmp_path: Path, layout: Any) -> None:
    # Once a traceback of the command (OverflowError): "ts": 1e400 is infinite as a float, and
    # 1e300 µs is past the 64-bit records.
    for number in (b"1e400", b"1e300", b"-99999999999999999999"):
        trace = TraceBuilder()
        trace.device("gemm", 10, 5)
        path = trace.write(tmp_path / "t.json", layout=layout)
        path.write_bytes(re.sub(rb'"ts": 10\b', b'"ts": ' + number, path.read_bytes()))
        assert b'"ts": ' + number in path.read_bytes()
        reason = analyze_path(path).reason
        assert reason == (
            f"a time of {number.decode()} µs is beyond what the analysis holds (about 146 "
            "years either way)"
        )


def test_kernel_totals_past_64_bits_fail_the_file_with_a_reason(tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.step(2, 100, 100)
    for i in range(3):  # each 4e18 ns fits; their sum in step 1 does not
        t.device("gemm", 10 + i, 4_000_000_000_000_000)
    reason = analyze_path(t.write(tmp_path / "t.json")).reason
    assert reason == "a sum of kernel durations is beyond 64 bits of nanoseconds"


def test_objects_in_a_list_after_the_events_are_the_documents_tail_not_events() -> None:
    # A writer that puts distributedInfo after traceEvents (inspection reads it there too):
    # its pg_config objects looked like event boundaries, the fast reading went past the
    # list's end, and every such trace was "truncated or malformed".
    document = training(rank=1, steps=2, kernels=30).trace()
    info = document.pop("distributedInfo")
    info["pg_config"] = [{"pg_name": str(group), "ranks": [0, 1]} for group in range(50)]
    after = f'\n  ],\n  "distributedInfo": {json.dumps(info)},\n  "traceName"'
    moved = pytorch_json(document).replace('\n  ],\n  "traceName"', after).encode()
    expected = as_json(analysis_of(pytorch_json(document).encode(), chunk=1 << 30))
    for chunk in (1000, 4096, 1 << 30):
        assert as_json(analysis_of(moved, chunk=chunk)) == expected
    with pytest.raises(InspectionError, match="does not end properly"):
        analysis_of(moved.replace(b'"traceName"', b'"traceName" ]'), chunk=1000)
