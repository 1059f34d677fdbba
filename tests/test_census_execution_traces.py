"""The rank census of execution traces: ET sets, the Kineto and ET halves of each rank, and
Chakra process groups checked against a comm-group file (split from test_inspect_census.py)."""

from __future__ import annotations

import io
from pathlib import Path

from tests.support.inspect_fixtures import (
    census_of,
    comms_values,
    execution_trace_with_rows,
    kineto_trace,
    old_comms_values,
)
from tests.support.paths import TESTDATA
from tracestore.inspect import FileInspection, RankRange, inspect_file, inspect_path, rank_census

# --- execution traces ------------------------------------------------------------------


def test_real_resnet_et_set_is_complete() -> None:
    directory = TESTDATA / "pytorch-et-resnet50-ddp-2ranks"
    census, _ = census_of(sorted(directory.iterdir()), 2)
    assert census.ranks_found == (0, 1) and census.world_sizes.keys() == {2}
    assert census.rank_count_matches.passed, census.rank_count_matches.message


def test_real_megatron_et_rank_five_of_eight_leaves_seven_missing() -> None:
    path = TESTDATA / "pytorch-et-megatron-tp8-rank5" / "megatron_et_5.json"
    census, _ = census_of([path], None)
    assert (census.expected_rank_count, census.expected_from) == (8, "worldSize")
    assert census.ranks_found == (5,)
    assert census.ranks_missing == (RankRange(0, 4), RankRange(6, 7))
    assert not census.rank_count_matches.passed
    assert "7 of 8 ranks missing: 0..4, 6..7" in census.rank_count_matches.message


def test_complete_eight_rank_et_set(tmp_path: Path) -> None:
    paths = []
    for rank in range(8):
        path = tmp_path / f"host_{rank}.json"
        path.write_bytes(execution_trace_with_rows([comms_values(rank)]))
        paths.append(path)
    census, _ = census_of(paths, 8)
    assert census.ranks_found == tuple(range(8)) and census.rank_count_matches.passed


def test_complete_eight_rank_set_of_seven_slot_rows(tmp_path: Path) -> None:
    # Schema 1.0.1 as PyTorch 2.0/2.1 wrote it: [tensors, seq, pg_ptr, rank, collective,
    # in_split, out_split], the group pointer differing by process, no group size.
    paths = []
    for rank in range(8):
        rows = [old_comms_values(rank, pg_ptr=94251230035200 + 4096 * rank)] * 2
        rows.append(old_comms_values(rank, "wait"))
        path = tmp_path / f"megatron_et_{rank}.json"
        path.write_bytes(execution_trace_with_rows(rows, old_layout=True, pid=2590092 + rank))
        paths.append(path)
    census, files = census_of(paths, 8)
    assert [files[p.name].rank for p in paths] == list(range(8))
    assert census.ranks_found == tuple(range(8)) and census.unranked_files == ()
    assert census.rank_count_matches.passed, census.rank_count_matches.message
    undeclared, _ = census_of(paths, None)
    assert (undeclared.expected_rank_count, undeclared.expected_from) == (8, "ranks")
    assert undeclared.rank_count_matches.passed, undeclared.rank_count_matches.message


# --- Kineto and execution-trace halves -----------------------------------------------------


def kineto_of(rank: int | None, world: int, pid: int) -> FileInspection:
    data = kineto_trace(rank, world).replace(b'"pid": 4242', f'"pid": {pid}'.encode())
    return inspect_file(lambda: io.BytesIO(data), f"k{rank}.pt.trace.json")


def et_of(rows: list[list[object]], pid: int, name: str = "et.json") -> FileInspection:
    data = execution_trace_with_rows(rows, pid=pid)
    return inspect_file(lambda: io.BytesIO(data), name)


def test_kineto_and_et_of_each_rank_are_halves_not_duplicates() -> None:
    files = []
    for rank in range(2):
        files.append((f"k{rank}.json", kineto_of(rank, 2, 100 + rank)))
        files.append((f"e{rank}.json", et_of([comms_values(rank, world_size=2)], 100 + rank)))
    census = rank_census(files, declared_rank_count=2, workload_metadata=None)
    assert census.duplicated == {}
    assert census.rank_count_matches.passed, census.rank_count_matches.message
    ranks = census.to_json()["ranks"]
    assert [(r["rank"], r["halves"]) for r in ranks] == [
        (0, ["executionTrace", "kineto"]),
        (1, ["executionTrace", "kineto"]),
    ]
    assert ranks[1]["files"][1] == {
        "file": "e1.json",
        "kind": "executionTrace",
        "rankSource": "record_param_comms",
        "rankProvenance": census.ranks[1].files[1].rank_provenance,
        "pid": 101,
    }


def test_an_unranked_et_takes_the_rank_of_the_kineto_trace_with_its_pid() -> None:
    waits_only = et_of([comms_values(1, "wait")], 2590097)
    assert waits_only.rank is None
    files = [("k.json", kineto_of(1, 2, 2590097)), ("e.json", waits_only)]
    files.append(("k0.json", kineto_of(0, 2, 7)))
    files.append(("e0.json", et_of([comms_values(0, world_size=2)], 7)))
    census = rank_census(files, declared_rank_count=2, workload_metadata=None)
    assert census.unranked_files == ()
    assert census.rank_count_matches.passed, census.rank_count_matches.message
    adopted = next(f for f in census.ranks[1].files if f.file == "e.json")
    assert adopted.rank_source == "pid"
    assert adopted.rank_provenance is not None
    assert adopted.rank_provenance.startswith("pid 2590097, shared with k.json whose rank 1")
    assert census.rank_provenance["e.json"] == adopted.rank_provenance
    assert census.rank_ranges["e.json"] == RankRange(1, 1)


def test_halves_sharing_a_pid_but_not_a_rank_fail() -> None:
    # The Megatron trap: a group-local rank 0 where the Kineto trace of the pid says 5.
    et = et_of([[[[1, 2, 0, 4, 2, "cuda:5"]], 5, 9382, 0, "allreduce", [], [], 1]], 2590097)
    files = [("megatron_kineto_5.json", kineto_of(5, 8, 2590097)), ("megatron_et.json", et)]
    census = rank_census(files, declared_rank_count=None, workload_metadata=None)
    assert not census.rank_count_matches.passed
    assert (
        "megatron_kineto_5.json (Kineto, rank 5) and megatron_et.json (execution trace, rank 0) "
        "share pid 2590097 but their ranks disagree" in census.rank_count_matches.message
    )


def test_halves_of_one_rank_with_different_pids_fail() -> None:
    files = [
        ("k.json", kineto_of(0, 1, 10)),
        ("e.json", et_of([comms_values(0, world_size=1)], 11)),
    ]
    census = rank_census(files, declared_rank_count=1, workload_metadata=None)
    assert not census.rank_count_matches.passed
    assert (
        "rank 0: k.json (Kineto, pid 10) and e.json (execution trace, pid 11) disagree on the pid"
        in census.rank_count_matches.message
    )


def test_a_rank_missing_its_execution_trace_is_named() -> None:
    files = [(f"k{r}.json", kineto_of(r, 2, 50 + r)) for r in range(2)]
    files.append(("e0.json", et_of([comms_values(0, world_size=2)], 50)))
    census = rank_census(files, declared_rank_count=2, workload_metadata=None)
    assert not census.rank_count_matches.passed
    assert "no execution trace for rank 1, which has a Kineto trace (k1.json)" in (
        census.rank_count_matches.message
    )
    assert [e.halves for e in census.ranks] == [("executionTrace", "kineto"), ("kineto",)]


def test_two_kineto_traces_of_one_rank_are_still_duplicates() -> None:
    files = [("a.json", kineto_of(0, 1, 1)), ("b.json", kineto_of(0, 1, 2))]
    files.append(("e.json", et_of([comms_values(0, world_size=1)], 1)))
    census = rank_census(files, declared_rank_count=1, workload_metadata=None)
    assert census.duplicated == {0: ("a.json", "b.json")}


def test_real_megatron_et_pairs_with_its_kineto_pid() -> None:
    path = TESTDATA / "pytorch-et-megatron-tp8-rank5" / "megatron_et_5.json"
    files = [("megatron_et_5.json", inspect_path(path))]
    files.append(("megatron_kineto_5.json", kineto_of(5, 8, 2590097)))
    census = rank_census(files, declared_rank_count=8, workload_metadata=None)
    assert [(e.rank, e.halves) for e in census.ranks] == [(5, ("executionTrace", "kineto"))]
    assert census.duplicated == {}
    assert "7 of 8 ranks missing: 0..4, 6..7" in census.rank_count_matches.message
    assert "pid" not in census.rank_count_matches.message


# --- Chakra process groups against a comm-group file ----------------------------------------


def test_real_chakra_sets_with_their_comm_group_files_are_complete() -> None:
    for folder, world in (
        ("chakra-et-allreduce-3pg-2ranks", 2),
        ("chakra-et-stg-dp2tp2-4ranks", 4),
    ):
        census, _ = census_of(sorted((TESTDATA / folder).iterdir()), None)
        assert (census.expected_rank_count, census.expected_from) == (world, "worldSize")
        assert census.ranks_found == tuple(range(world)) and census.unranked_files == ()
        assert census.rank_count_matches.passed, census.rank_count_matches.message
    stg = sorted((TESTDATA / "chakra-et-stg-dp2tp2-4ranks").iterdir())
    declared, _ = census_of(stg, 4, {"parallelism": {"dp": 2, "tp": 2}})
    assert declared.rank_count_matches.passed and declared.parallelism_consistent.passed


def test_a_group_without_the_rank_or_missing_from_the_comm_group_file_fails(
    tmp_path: Path,
) -> None:
    source = TESTDATA / "chakra-et-stg-dp2tp2-4ranks"
    paths = []
    for rank in range(4):
        path = tmp_path / f"denseA.{rank}.et"
        path.write_bytes((source / path.name).read_bytes())
        paths.append(path)
    groups = tmp_path / "denseA.json"
    groups.write_text('{"1": [0, 1], "2": [2, 3], "3": [1, 2]}')  # "3" lacks 0 and 2; no "4"
    census, _ = census_of([*paths, groups], 4)
    message = census.rank_count_matches.message
    assert not census.rank_count_matches.passed
    assert (
        'denseA.0.et (rank 0) runs collectives on process group "3", which denseA.json gives '
        "as [1, 2], without rank 0" in message
    )
    assert 'denseA.1.et runs collectives on process group "4", which denseA.json does not list' in (
        message
    )
