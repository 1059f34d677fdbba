"""Stragglers (issue 45, items 1 and 4): synthetic multi-rank runs whose straggler is known
(``kineto_traces.straggler_run``), written as PyTorch writes them and analysed as a file
is; the real samples; and the same through the service on the test database (SQLite, or
PostgreSQL in the PostgreSQL pass), with validate's ``stragglers`` check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.kineto_traces import TraceBuilder, straggler_run
from tests.support.paths import TESTDATA
from tests.support.uploading import upload
from tracestore.analysis import AnalysedRank, Limits, analyze_path, traceset_json
from tracestore.analysis.model import KERNEL_ROWS
from tracestore.analysis.stragglers import CollectiveColumns, RankSource, verdict
from tracestore.analysis.summary import ranks_verdict
from tracestore.server import analysis, db, stragglers
from tracestore.server.services import Services

SECONDS = 1_000_000  # µs


def _analysed(builders: list[TraceBuilder], tmp_path: Path, **limits: Any) -> list[AnalysedRank]:
    ranks = []
    for builder in builders:
        path = builder.write(tmp_path / f"rank{builder.rank}.pt.trace.json")
        outcome = analyze_path(path, path.name, Limits(**limits))
        assert outcome.rank is not None, outcome.reason
        ranks.append(outcome.rank)
    return ranks


def _summary(builders: list[TraceBuilder], tmp_path: Path, **limits: Any) -> dict[str, Any]:
    summary = traceset_json(_analysed(builders, tmp_path, **limits))["summary"]
    assert summary is not None
    return dict(summary)


def _named(summary: dict[str, Any]) -> list[int]:
    return [entry["rank"] for entry in summary["stragglers"]]


@pytest.mark.parametrize(("slow_rank", "factor"), [(5, 1.1), (2, 1.2), (7, 1.3), (0, 1.15)])
@pytest.mark.parametrize("sequence", [True, False])
def test_a_rank_computing_10_to_30_percent_longer_is_named_first(
    tmp_path: Path, slow_rank: int, factor: float, sequence: bool
) -> None:
    run = straggler_run(8, slow={slow_rank: factor}, jitter=0.03, sequence=sequence)
    summary = _summary(run, tmp_path)
    first = summary["stragglers"][0]
    assert first["rank"] == slow_rank
    assert first["computeRatio"] == pytest.approx(factor, abs=0.04)
    # It arrives last at (nearly) every all-reduce and waits least.
    assert first["lastArrivals"] >= 20
    assert summary["collectiveMatching"] == {
        "matched": 24,
        "arrivalsBy": "start",
        "dropped": 0,
        "note": summary["collectiveMatching"]["note"],
    }
    assert first["reason"] == (
        f"rank {slow_rank} computes {first['computeRatio']:.2f} × the median rank per step "
        f"and started last in {first['lastArrivals']} of 24 collectives"
    )
    assert _named(summary) == [slow_rank]


def test_the_straggler_waits_least_and_the_others_wait_for_it(tmp_path: Path) -> None:
    found = ranks_verdict(_analysed(straggler_run(8, slow={3: 1.25}, jitter=0.02), tmp_path))
    waits = {rank.rank: rank.wait_by_start for rank in found.ranks}
    assert min(waits, key=lambda r: waits[r]) == 3
    # Each other rank waits about the 250 µs the straggler computes longer, 24 times.
    for rank, wait in waits.items():
        if rank != 3:
            assert 24 * 150_000 < wait < 24 * 350_000, (rank, wait)


@pytest.mark.parametrize("ranks", [8, 4])
def test_a_balanced_run_names_none(tmp_path: Path, ranks: int) -> None:
    summary = _summary(straggler_run(ranks, jitter=0.04, steps=10), tmp_path)
    assert summary["stragglers"] == []
    assert summary["collectiveMatching"]["matched"] == 40


def test_two_balanced_ranks_are_not_judged_by_who_started_last(tmp_path: Path) -> None:
    # With two ranks one of them starts last half the time by chance: that alone names none.
    summary = _summary(straggler_run(2, jitter=0.04, steps=10, seed=7), tmp_path)
    assert summary["stragglers"] == []
    slow = _summary(straggler_run(2, slow={1: 1.2}, jitter=0.04, steps=10), tmp_path)
    assert _named(slow) == [1]


def test_hosts_clocks_seconds_apart_do_not_change_the_verdict(tmp_path: Path) -> None:
    offsets = {rank: (-1) ** rank * rank * 1.5 * SECONDS for rank in range(8)}
    slow = _summary(straggler_run(8, slow={6: 1.12}, jitter=0.03, offsets=offsets), tmp_path)
    assert _named(slow)[:1] == [6]
    assert slow["stragglers"][0]["reason"].startswith("rank 6 computes 1.1")
    assert "waited least in" in slow["stragglers"][0]["reason"]
    matching = slow["collectiveMatching"]
    assert matching["arrivalsBy"] == "duration"
    assert "clocks disagree" in matching["note"]
    balanced = _summary(straggler_run(8, jitter=0.03, offsets=offsets), tmp_path)
    assert balanced["stragglers"] == []
    assert balanced["collectiveMatching"]["arrivalsBy"] == "duration"


def test_clocks_offset_on_one_host_only_still_match_by_durations(tmp_path: Path) -> None:
    # Ranks 4-7 on a second machine whose clock runs 3 s ahead.
    offsets = {rank: 3 * SECONDS for rank in range(4, 8)}
    summary = _summary(straggler_run(8, slow={1: 1.2}, jitter=0.03, offsets=offsets), tmp_path)
    assert _named(summary) == [1]
    assert summary["stragglers"][0]["lastArrivals"] >= 20


@pytest.mark.parametrize("sequence", [True, False])
def test_a_rank_that_misses_a_collective_does_not_break_the_matching(
    tmp_path: Path, sequence: bool
) -> None:
    run = straggler_run(8, slow={4: 1.2}, jitter=0.03, missing=(2, 5), sequence=sequence)
    summary = _summary(run, tmp_path)
    assert _named(summary)[0] == 4
    if sequence:  # by NCCL's sequence number the rest still match one to one
        assert summary["collectiveMatching"]["matched"] == 24
        assert summary["stragglers"][0]["lastArrivals"] >= 20


def test_a_collective_only_one_rank_recorded_is_not_matched() -> None:
    rows = CollectiveColumns.of_rows([("0", 1, 0, 10), ("0", 2, 100, 10)])
    only = RankSource(0, lambda: rows, [(1, 50)])
    other = RankSource(1, lambda: CollectiveColumns.of_rows([("0", 1, 5, 5)]), [(1, 50)])
    found = verdict([only, other])
    assert found.matched == 1
    assert [(r.rank, r.matched, r.wait_by_start) for r in found.ranks] == [(0, 1, 5), (1, 1, 0)]
    assert verdict([]).stragglers == [] and verdict([]).arrivals_by is None


def test_the_collectives_kept_per_rank_are_bounded_and_the_rest_counted(tmp_path: Path) -> None:
    run = straggler_run(4, slow={1: 1.2}, jitter=0.02)
    ranks = _analysed(run, tmp_path, collectives=5)
    assert all(len(r.analysis.collectives) == 5 for r in ranks)
    assert all(r.analysis.collectives_dropped == 19 for r in ranks)
    summary = traceset_json(ranks)["summary"]
    assert summary["collectiveMatching"]["matched"] == 5
    assert summary["collectiveMatching"]["dropped"] == 4 * 19
    assert "TRACESTORE_STRAGGLER_COLLECTIVES" in summary["collectiveMatching"]["note"]
    assert _named(summary) == [1]


def test_the_real_samples_are_analysed_without_error() -> None:
    dlrm = []
    for path in sorted((TESTDATA / "kineto-dlrm-8ranks").iterdir()):
        outcome = analyze_path(path, path.name)
        assert outcome.rank is not None
        dlrm.append(outcome.rank)
    summary = traceset_json(dlrm)["summary"]
    # 5 send/recv and 3 all-reduce kernels per rank, matched by order (no Seq recorded).
    assert summary["collectiveMatching"]["matched"] == 8
    assert summary["collectiveMatching"]["arrivalsBy"] == "start"
    for entry in summary["stragglers"]:
        assert entry["reason"].startswith(f"rank {entry['rank']} ")
        assert entry["computeRatio"] >= 1.10 or entry["lastArrivals"] > 4
    for part in ("ddp", "subgroups"):
        gloo = []
        for path in sorted((TESTDATA / "pytorch213-ddp-gloo-4ranks" / part).glob("*.kineto*")):
            outcome = analyze_path(path, path.name)
            assert outcome.rank is not None
            gloo.append(outcome.rank)
        # Gloo's collectives run on the CPU: no kernel to match, nothing computed on a GPU.
        summary = traceset_json(gloo)["summary"]
        assert summary["stragglers"] == []
        assert summary["collectiveMatching"]["matched"] == 0


# HTA 0.5.0's TraceAnalysis.get_potential_stragglers, in a process of its own.
_HTA_STRAGGLERS = """
import logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
try:
    print(TraceAnalysis(trace_dir=sys.argv[1]).get_potential_stragglers(num_candidates=1))
except ValueError as exc:
    print("ValueError", exc)
"""
OLD_NAME = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _hta_stragglers(directory: Path) -> str:
    run = subprocess.run(
        [sys.executable, "-c", _HTA_STRAGGLERS, str(directory)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip()


def test_hta_finds_the_straggler_only_under_old_nccl_names_and_one_clock(tmp_path: Path) -> None:
    """docs/analysis.md's HTA difference: its check takes ``ncclKernel*`` kernels only, and
    filters them by times read across ranks; ours names rank 5 in all three runs."""
    runs = {
        "old": straggler_run(8, slow={5: 1.2}, jitter=0.03, collective=OLD_NAME),
        "new": straggler_run(8, slow={5: 1.2}, jitter=0.03),
        "clocks": straggler_run(
            8,
            slow={5: 1.2},
            jitter=0.03,
            collective=OLD_NAME,
            offsets={rank: 3 * SECONDS for rank in range(4, 8)},
        ),
    }
    found = {}
    for name, run in runs.items():
        (tmp_path / name).mkdir()
        assert _named(_summary(run, tmp_path / name)) == [5]
        found[name] = _hta_stragglers(tmp_path / name)
    assert found["old"] == "[5]"
    assert found["new"] == "ValueError attempt to get argmax of an empty sequence"
    assert found["clocks"] == "ValueError attempt to get argmax of an empty sequence"


# --- through the service, on the test database ---


def _files(builders: list[TraceBuilder], tmp_path: Path) -> dict[str, tuple[bytes, str]]:
    files = {}
    for builder in builders:
        path = builder.write(tmp_path / f"rank{builder.rank}.pt.trace.json")
        files[path.name] = (path.read_bytes(), "primary")
    return files


def _validate(http: TestClient, traceset_id: str) -> dict[str, Any]:
    answer = http.post(f"/api/v1/tracesets/{traceset_id}/validate")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return dict(next(check for check in body["checks"] if check["name"] == "stragglers"))


def test_the_service_names_the_straggler_and_validate_warns(
    http: TestClient, services: Services, tmp_path: Path
) -> None:
    offsets = {rank: 2 * SECONDS for rank in range(4, 8)}
    run = straggler_run(8, slow={6: 1.2}, jitter=0.03, offsets=offsets)
    files = _files(run, tmp_path)
    traceset = upload(http, files, {"shape": {"rankCount": 8}})
    assert _validate(http, traceset["id"])["passed"] is None  # the analysis is pending
    services.wait_for_background()
    answer = http.get(f"/api/v1/tracesets/{traceset['id']}/analysis").json()
    local = traceset_json(_analysed(run, tmp_path), KERNEL_ROWS)
    assert json.loads(json.dumps(local["summary"])) == answer["summary"]
    assert _named(answer["summary"]) == [6]
    check = _validate(http, traceset["id"])
    assert check["passed"] is True and check["warning"] is True
    assert check["message"] == "1 straggler: " + answer["summary"]["stragglers"][0]["reason"]
    body = http.post(f"/api/v1/tracesets/{traceset['id']}/validate").json()
    assert body["valid"] is True  # a warning
    # The pass reads the detail's collectives without decoding its per-step kernel totals.
    with services.db.session(write=False) as session:
        blob = session.get(db.FileAnalysis, (traceset["id"], 3))
        assert blob is not None
        whole = analysis.stored_detail(blob.detail)
        part = stragglers.stored_collectives(blob.detail)
    assert whole is not None and part is not None and whole["stepKernels"]["step"]
    assert part == {key: whole[key] for key in stragglers.COLLECTIVE_MEMBERS}
    assert set(stragglers.COLLECTIVE_MEMBERS) < set(whole)  # all there, and not the whole


def test_the_service_names_none_in_a_balanced_run(
    http: TestClient, services: Services, tmp_path: Path
) -> None:
    traceset = upload(
        http, _files(straggler_run(4, jitter=0.03), tmp_path), {"shape": {"rankCount": 4}}
    )
    services.wait_for_background()
    summary = http.get(f"/api/v1/tracesets/{traceset['id']}/analysis").json()["summary"]
    assert summary["stragglers"] == [] and summary["collectiveMatching"]["matched"] == 24
    check = _validate(http, traceset["id"])
    assert check == {
        "name": "stragglers",
        "passed": True,
        "message": "no straggler among 4 ranks (24 collectives matched)",
        "warning": False,
    }


def test_a_stored_detail_that_cannot_be_read_back_leaves_the_summary_saying_why(
    http: TestClient, services: Services, tmp_path: Path
) -> None:
    traceset = upload(
        http, _files(straggler_run(4, jitter=0.03), tmp_path), {"shape": {"rankCount": 4}}
    )
    services.wait_for_background()
    with services.db.session() as session:
        row = session.get(db.FileAnalysis, (traceset["id"], 2))
        assert row is not None
        row.detail = b"not zlib"
    found = stragglers.straggler_verdict(services, traceset["id"])
    assert found.stragglers == [] and found.matched == 0
    assert found.summary_json()["note"] == (
        "No straggler verdict: a stored analysis could not be read back: its compressed "
        "detail is damaged."
    )
