"""Process groups across a traceset's files and the ``process_groups`` check."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.support.bounded import bounded_memory
from tests.support.inspect_fixtures import chakra_node, chakra_trace, delimited
from tests.support.paths import TESTDATA
from tracestore.cli import main
from tracestore.inspect import (
    FoundGroup,
    RankCensus,
    inspect_path,
    rank_census,
    validation_checks,
)


def _kineto(rank: int, world: int, groups: list[list[int]]) -> bytes:
    """A Kineto trace whose distributedInfo lists the default group and ``groups``."""
    config = [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": world, "ranks": list(range(world))}
    ]
    config += [
        {"pg_name": str(i + 1), "pg_desc": "undefined", "pg_size": len(g), "ranks": g}
        for i, g in enumerate(groups)
        if rank in g
    ]
    info = {"backend": "nccl", "rank": rank, "world_size": world, "pg_config": config}
    return json.dumps({"schemaVersion": 1, "distributedInfo": info, "traceEvents": []}).encode()


def _census(
    tmp_path: Path,
    ranks: list[int],
    world: int,
    groups: list[list[int]],
    metadata: object,
    declared: int | None = None,
) -> RankCensus:
    files = []
    for rank in ranks:
        path = tmp_path / f"rank{rank}.pt.trace.json"
        path.write_bytes(_kineto(rank, world, groups))
        files.append((path.name, inspect_path(path, path.name)))
    return rank_census(files, declared_rank_count=declared, workload_metadata=metadata)


TP4_OF_16 = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
DP4_OF_16 = [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]


def test_groups_are_merged_across_ranks(tmp_path: Path) -> None:
    census = _census(tmp_path, list(range(16)), 16, TP4_OF_16, None)
    sizes = sorted(g.size for g in census.process_groups)
    assert sizes == [4, 4, 4, 4, 16]
    first = next(g for g in census.process_groups if g.ranks == (0, 1, 2, 3))
    assert first.files == tuple(f"rank{r}.pt.trace.json" for r in range(4))
    assert census.to_json()["processGroups"][0]["size"] == 16
    check = census.process_groups_match
    assert check.passed and not check.warning
    assert check.message == (
        "5 process groups recorded (4 of size 4, 1 of size 16); no parallelism degrees "
        "declared to check"
    )


def test_one_group_read_from_several_traces_is_counted_once(tmp_path: Path) -> None:
    # Issue 46: the execution trace lists the default group with "ranks": [] (the world),
    # its Kineto twin with every member; two groups with the same members stay two.
    pg_init = [
        {"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 2},
        {"pg_name": "1", "pg_desc": "undefined", "ranks": [0, 1], "group_size": 2},
        {"pg_name": "2", "pg_desc": "undefined", "ranks": [0, 1], "group_size": 2},
    ]
    files = []
    for rank in range(2):
        kineto = tmp_path / f"rank{rank}.kineto.json"
        kineto.write_bytes(_kineto(rank, 2, [[0, 1], [0, 1]]))
        et = tmp_path / f"rank{rank}.et.json"
        node = {
            "id": 3,
            "name": "## process_group:init ##",
            "inputs": {"values": [json.dumps(pg_init)]},
        }
        et.write_text(
            json.dumps({"schema": "1.1.1-chakra.0.0.4", "pid": 7 + rank, "nodes": [node]})
        )
        files += [(p.name, inspect_path(p, p.name)) for p in (et, kineto)]
    census = rank_census(files, declared_rank_count=2, workload_metadata={"parallelism": {"dp": 2}})
    everyone = tuple(name for name, _ in files)
    assert census.process_groups == (
        FoundGroup("0", 2, (0, 1), everyone),
        FoundGroup("1", 2, (0, 1), everyone),
        FoundGroup("2", 2, (0, 1), everyone),
    )
    assert census.process_groups_match.message == (
        "declared dp=2 each match process groups: 3 process groups recorded (3 of size 2)"
    )


def test_a_default_group_without_members_or_size_is_the_files_world(tmp_path: Path) -> None:
    pg_init = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": []}]
    node = {
        "id": 3,
        "name": "## process_group:init ##",
        "inputs": {"values": [json.dumps(pg_init)]},
    }
    row = [[[1, 2, 0, 4, 4, "cpu"]], 3, ["0", "default_pg"], 1, "allreduce", [], [], 0, 1, 4]
    comms = {"id": 9, "name": "record_param_comms", "inputs": {"values": row}}
    et = tmp_path / "et.json"
    et.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "pid": 7, "nodes": [node, comms]}))
    census = rank_census(
        [(et.name, inspect_path(et, et.name))], declared_rank_count=None, workload_metadata=None
    )
    assert census.process_groups == (FoundGroup("0", 4, None, ("et.json",)),)


def _chakra_set(tmp_path: Path, groups: dict[str, list[int]], ranks: list[int]) -> list[Path]:
    """Chakra traces of ``ranks``, each all-reducing on its groups, and their comm-group file."""
    paths = []
    for rank in ranks:
        nodes = b"".join(
            delimited(
                chakra_node(i + 1, "ncclDevKernel_AllReduce", 7, {"comm_type": 0, "pg_name": name})
            )
            for i, (name, members) in enumerate(groups.items())
            if rank in members
        )
        path = tmp_path / f"trace.{rank}.et"
        path.write_bytes(chakra_trace(nodes))
        paths.append(path)
    comm_groups = tmp_path / "comm_group.json"
    comm_groups.write_text(json.dumps(groups))
    return [*paths, comm_groups]


def _groups_census(paths: list[Path], metadata: object, declared: int | None) -> RankCensus:
    files = [(p.name, inspect_path(p, p.name)) for p in paths]
    return rank_census(files, declared_rank_count=declared, workload_metadata=metadata)


def test_a_degree_equal_to_the_world_is_no_group_when_other_degrees_split_it(
    tmp_path: Path,
) -> None:
    # Issue 41: tp=4, dp=2 against 4 ranks whose groups have 2 members passed, tp=4 taken
    # for the default group; with dp=2 beside it, tp=4 names groups of 4 that are not there.
    tp4_dp2 = {"parallelism": {"tp": 4, "dp": 2}}
    paths = _chakra_set(tmp_path, {"1": [0, 1], "2": [2, 3]}, [0, 1, 2, 3])
    check = _groups_census(paths, tp4_dp2, None).process_groups_match
    assert not check.passed
    assert check.message == (
        "declared tp=4, but no process group of size 4 (group sizes recorded: 2)"
    )
    # Two of four ranks captured, the only group recorded of 2 members: a warning.
    subset = tmp_path / "subset"
    subset.mkdir()
    check = _groups_census(
        _chakra_set(subset, {"1": [0, 1]}, [0, 1]), tp4_dp2, 4
    ).process_groups_match
    assert check.passed and check.warning
    assert check.message == (
        "only 2 of 4 ranks were captured, so groups may be missing: declared tp=4, but no "
        "process group of size 4 (group sizes recorded: 2)"
    )
    # A degree that alone spans the world is the default group, recorded or not.
    alone = _groups_census(sorted(subset.iterdir()), {"parallelism": {"dp": 4}}, 4)
    assert alone.process_groups_match.passed, alone.process_groups_match.message


def test_declared_degrees_matching_the_groups_pass(tmp_path: Path) -> None:
    metadata = {"parallelism": {"tp": 4, "dp": 4}}
    census = _census(tmp_path, list(range(16)), 16, TP4_OF_16 + DP4_OF_16, metadata, 16)
    assert census.process_groups_match.passed
    assert census.process_groups_match.message.startswith("declared tp=4, dp=4 each match")


def test_declared_degree_without_a_group_fails_naming_it(tmp_path: Path) -> None:
    metadata = {"parallelism": {"tp": 8, "dp": 2}}
    census = _census(tmp_path, list(range(16)), 16, TP4_OF_16, metadata, 16)
    check = census.process_groups_match
    assert not check.passed
    assert "declared tp=8, but no process group of size 8 (group sizes recorded: 4, 16)" in (
        check.message
    )
    assert "declared dp=2, but no process group of size 2" in check.message
    assert "groups of size 4 partition 16 ranks, but no declared degree is 4: pp or ep of 4?" in (
        check.message
    )
    by_name = {c["name"]: c for c in validation_checks(census.to_json())}
    assert by_name["process_groups"]["passed"] is False


def test_a_subset_of_ranks_gives_warnings(tmp_path: Path) -> None:
    metadata = {"parallelism": {"tp": 8, "dp": 2}}
    census = _census(tmp_path, [0, 1], 16, TP4_OF_16, metadata, 16)
    check = census.process_groups_match
    assert check.passed and check.warning
    assert check.message.startswith(
        "only 2 of 16 ranks were captured, so groups may be missing: declared tp=8, but no "
        "process group of size 8"
    )
    by_name = {c["name"]: c for c in validation_checks(census.to_json())}
    assert by_name["process_groups"] == {
        "name": "process_groups",
        "passed": True,
        "warning": True,
        "message": check.message,
    }


def test_no_groups_recorded() -> None:
    census = rank_census([], declared_rank_count=None, workload_metadata={"parallelism": {"tp": 2}})
    assert census.process_groups == ()
    assert census.process_groups_match.passed
    assert census.process_groups_match.message == (
        "no process groups recorded in the files; declared tp=2 not checked"
    )


def test_megatron_rank5_group_of_8_matches_tp8() -> None:
    path = TESTDATA / "pytorch-et-megatron-tp8-rank5" / "megatron_et_5.json"
    files = [(path.name, inspect_path(path, path.name))]
    ok = rank_census(files, declared_rank_count=8, workload_metadata={"parallelism": {"tp": 8}})
    assert {g.size for g in ok.process_groups} == {8, 1}
    assert ok.process_groups_match.passed and not ok.process_groups_match.warning
    wrong = rank_census(
        files, declared_rank_count=8, workload_metadata={"parallelism": {"tp": 4, "dp": 2}}
    )
    check = wrong.process_groups_match
    assert check.passed and check.warning  # 1 of 8 ranks: a warning, not a failure
    assert "only 1 of 8 ranks were captured" in check.message
    assert "declared tp=4, but no process group of size 4 (group sizes recorded: 1, 8)" in (
        check.message
    )


def test_dense_dp2_tp2_comm_groups_match() -> None:
    directory = TESTDATA / "chakra-et-stg-dp2tp2-4ranks"
    files = [(p.name, inspect_path(p, p.name)) for p in sorted(directory.iterdir())]
    census = rank_census(
        files, declared_rank_count=4, workload_metadata={"parallelism": {"dp": 2, "tp": 2}}
    )
    pairs = {g.ranks: g.files for g in census.process_groups if g.size == 2}
    # Each group with the traces that run collectives on it and the file naming its members.
    assert pairs == {
        (0, 1): ("denseA.0.et", "denseA.1.et", "denseA.json"),
        (2, 3): ("denseA.2.et", "denseA.3.et", "denseA.json"),
        (0, 2): ("denseA.0.et", "denseA.2.et", "denseA.json"),
        (1, 3): ("denseA.1.et", "denseA.3.et", "denseA.json"),
    }
    assert census.process_groups_match.passed and not census.process_groups_match.warning
    lopsided = rank_census(
        files, declared_rank_count=4, workload_metadata={"parallelism": {"tp": 4}}
    ).process_groups_match
    assert not lopsided.passed
    assert lopsided.message == (
        "groups of size 2 partition 4 ranks, but no declared degree is 2: pp or dp of 2?"
    )


def test_groups_with_the_same_members_are_distinct_groups() -> None:
    # The run made two groups over both ranks beside the default one: three groups.
    directory = TESTDATA / "chakra-et-allreduce-3pg-2ranks"
    files = [(p.name, inspect_path(p, p.name)) for p in sorted(directory.iterdir())]
    census = rank_census(files, declared_rank_count=None, workload_metadata=None)
    traces = ("chakra_trace.0.et", "chakra_trace.1.et", "comm_group.json")
    assert census.process_groups == (
        FoundGroup("0", 2, (0, 1), ("comm_group.json",)),
        FoundGroup("1", 2, (0, 1), traces),
        FoundGroup("2", 2, (0, 1), traces),
    )


def test_cli_inspect_names_the_process_group_check(tmp_path: Path) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text('{"parallelism": {"tp": 4}}')
    directory = TESTDATA / "chakra-et-stg-dp2tp2-4ranks"
    result = CliRunner().invoke(
        main, ["inspect", str(directory), "--workload-metadata", str(meta), "--strict"]
    )
    assert result.exit_code == 1, result.output
    assert (
        "FAILED process groups: groups of size 2 partition 4 ranks, but no declared degree is "
        "2: pp or dp of 2?"
    ) in result.output
    meta.write_text('{"parallelism": {"dp": 2, "tp": 2}}')
    result = CliRunner().invoke(
        main, ["inspect", str(directory), "--workload-metadata", str(meta), "--strict"]
    )
    assert result.exit_code == 0, result.output
    assert "ok process groups: declared tp=2, dp=2 each match" in result.output


def test_many_claimed_group_sizes_against_the_largest_rank_count(tmp_path: Path) -> None:
    """Issue 41: a small Kineto file claiming 2,000 group sizes, with rankCount 2³¹−1,
    is checked in work bounded by its groups, not by 2,000 lists of every rank."""
    bound = 2_147_483_647
    config = [{"pg_name": str(i), "pg_desc": "undefined", "pg_size": i} for i in range(2, 2002)]
    config.append({"pg_name": "x", "pg_size": 2, "ranks": [0, 1]})
    info = {"backend": "nccl", "rank": 0, "world_size": bound, "pg_config": config}
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"distributedInfo": info, "traceEvents": []}))
    assert path.stat().st_size < 128_000
    files = [(path.name, inspect_path(path, path.name))]
    metadata = {"shape": {"rankCount": bound}, "parallelism": {"tp": bound, "cp": 3000}}
    with bounded_memory(512) as peak:
        census = rank_census(files, declared_rank_count=bound, workload_metadata=metadata)
    assert peak.mib < 8, f"the census of one 120 KB file held {peak.mib:.0f} MiB"
    check = census.process_groups_match
    assert len(census.process_groups) == 2001
    assert check.passed and check.warning  # one rank of 2³¹−1 captured: warnings only
    assert check.message.startswith(f"only 1 of {bound} ranks were captured, so groups may be ")
    assert (
        "declared cp=3000, but no process group of size 3000 (group sizes recorded: 2, 3, 4,"
        in (check.message)
    )
    assert "groups of size" not in check.message  # 2 ranks of 2³¹−1 partition nothing
