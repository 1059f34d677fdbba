"""Traces PyTorch 2.13 wrote (tests/data/pytorch213-ddp-gloo-4ranks, made by its
generate.py): every rank read, each execution trace paired with its Kineto twin by pid, the
collectives counted, and each process group counted once with the files it was read from
(issue 46), by the inspector, the command line and the service."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from fastapi.testclient import TestClient

from tests.support.inspect_fixtures import census_of
from tests.support.paths import TESTDATA
from tests.support.uploading import upload
from tracestore.cli import main
from tracestore.inspect import CensusCheck, FoundGroup

RUNS = TESTDATA / "pytorch213-ddp-gloo-4ranks"
DP4 = {"parallelism": {"dp": 4}}


def _names(ranks: range) -> tuple[str, ...]:
    return tuple(f"rank{r}.{kind}.json.gz" for r in ranks for kind in ("et", "kineto"))


def _paths(run: str) -> list[Path]:
    return sorted((RUNS / run).iterdir())


def test_plain_ddp_records_one_group_of_four() -> None:
    census, files = census_of(_paths("ddp"), 4, DP4)
    assert list(files) == list(_names(range(4)))
    assert census.ranks_found == (0, 1, 2, 3) and census.unranked_files == ()
    assert census.rank_count_matches.passed, census.rank_count_matches.message
    assert census.parallelism_consistent.passed, census.parallelism_consistent.message
    for rank in range(4):
        et, kineto = files[f"rank{rank}.et.json.gz"], files[f"rank{rank}.kineto.json.gz"]
        assert (et.format, kineto.format) == ("pytorch_et_json", "kineto_json")
        assert (et.schema_version, et.world_size, et.rank) == ("1.1.1-chakra.0.0.4", 4, None)
        assert (kineto.rank, kineto.world_size, kineto.backend) == (rank, 4, "gloo")
        assert et.pid == kineto.pid == 9778 + rank
        assert et.collectives == kineto.collectives == {"all_reduce": 2, "broadcast": 2}
        provenance = census.rank_provenance[et.name]
        assert provenance is not None and provenance.startswith(f"pid {9778 + rank}, shared with")
    # The execution traces' "ranks": [] and the Kineto traces' [0, 1, 2, 3]: one group.
    assert census.process_groups == (FoundGroup("0", 4, (0, 1, 2, 3), _names(range(4))),)
    assert census.process_groups_match == CensusCheck(
        True, "declared dp=4 each match process groups: 1 process groups recorded (1 of size 4)"
    )


def test_two_extra_groups_are_three_groups_in_all() -> None:
    census, files = census_of(_paths("subgroups"), 4, DP4)
    assert census.ranks_found == (0, 1, 2, 3) and census.rank_count_matches.passed
    for inspection in files.values():
        assert inspection.collectives == {"all_reduce": 4, "broadcast": 2}
    assert census.process_groups == (
        FoundGroup("0", 4, (0, 1, 2, 3), _names(range(4))),
        FoundGroup("1", 2, (0, 1), _names(range(2))),
        FoundGroup("2", 2, (2, 3), _names(range(2, 4))),
    )
    # Declared dp=4 alone, the pairs look like an undeclared dimension; tp=2, dp=2 match.
    assert census.process_groups_match == CensusCheck(
        False, "groups of size 2 partition 4 ranks, but no declared degree is 2: tp or pp of 2?"
    )
    paired, _ = census_of(_paths("subgroups"), 4, {"parallelism": {"dp": 2, "tp": 2}})
    assert paired.process_groups_match.passed, paired.process_groups_match.message
    assert paired.process_groups_match.message.endswith(
        "3 process groups recorded (2 of size 2, 1 of size 4)"
    )


def test_cli_inspect_reads_the_run(tmp_path: Path) -> None:
    metadata = tmp_path / "meta.json"
    metadata.write_text(json.dumps(DP4))
    args = ["inspect", str(RUNS / "ddp"), "--workload-metadata", str(metadata), "--strict"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "ranks 0-3: executionTrace + kineto" in result.output
    assert (
        "ok process groups: declared dp=4 each match process groups: 1 process groups "
        "recorded (1 of size 4)"
    ) in result.output


def test_the_service_inspects_the_run(http: TestClient) -> None:
    files = {p.name: (p.read_bytes(), "primary") for p in _paths("subgroups")}
    traceset = upload(http, files, {"shape": {"rankCount": 4}, "parallelism": {"dp": 2, "tp": 2}})
    census = traceset["inspection"]["census"]
    assert census["ranksFound"] == [0, 1, 2, 3]
    assert census["checks"]["rankCountMatches"]["passed"] is True
    assert census["checks"]["processGroupsMatch"]["passed"] is True
    assert census["processGroups"] == [
        {"name": "0", "size": 4, "ranks": [0, 1, 2, 3], "files": list(_names(range(4)))},
        {"name": "1", "size": 2, "ranks": [0, 1], "files": list(_names(range(2)))},
        {"name": "2", "size": 2, "ranks": [2, 3], "files": list(_names(range(2, 4)))},
    ]
    collectives = {f["name"]: f["collectives"] for f in traceset["inspection"]["files"]}
    assert collectives == {name: {"all_reduce": 4, "broadcast": 2} for name in _names(range(4))}
