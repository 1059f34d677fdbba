"""The facts of each trace format against the real samples' oracle (../shared/testdata/
SOURCES.md) and synthetic files built for each rule: ranks and their provenance, world
sizes, process groups, headers and collectives."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from tests.inspect_fixtures import (
    TESTDATA,
    comms_values,
    execution_trace_with_rows,
)
from tracestore.inspect import FileInspection, inspect_file, inspect_path

RESNET = TESTDATA / "pytorch-et-resnet50-ddp-2ranks"
KINETO_RANK3 = "worker3_step_12.1694128201557.pt.trace.json"
MEGATRON = TESTDATA / "pytorch-et-megatron-tp8-rank5" / "megatron_et_5.json"


def inspect_bytes(data: bytes, name: str, *, quick: bool = False) -> FileInspection:
    return inspect_file(lambda: io.BytesIO(data), name, quick=quick)


# --- PyTorch execution traces: the rank from record_param_comms ----------------------


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("quick", [False, True])
def test_real_resnet_et_records_its_rank_on_the_default_group(rank: int, quick: bool) -> None:
    result = inspect_path(RESNET / f"eg.rank_{rank}.pt.trace.json", quick=quick)
    assert result.status == "complete", result.reason
    assert result.format == "pytorch_et_json"
    assert (result.rank, result.world_size) == (rank, 2)
    assert result.rank_source == "record_param_comms"
    assert result.rank_provenance is not None
    assert "default_pg" in result.rank_provenance and "allreduce" in result.rank_provenance
    assert (result.pid, result.schema_version) == (3974 + rank, "1.0.2-chakra.0.0.4")
    if not quick:
        # The broadcast rows hold the root (0) and the wait rows are no collective.
        assert result.collectives == {"all_reduce": 5, "broadcast": 2}
        assert [(g.name, g.description, g.size) for g in result.process_groups] == [
            ("0", "default_pg", 2)
        ]


def test_real_megatron_et_ignores_the_group_local_rank_of_a_smaller_group() -> None:
    result = inspect_path(MEGATRON)
    assert result.status == "complete", result.reason
    assert (result.rank, result.world_size, result.pid) == (5, 8, 2590097)
    assert result.rank_source == "record_param_comms"
    assert result.rank_provenance is not None and "93825133359392" in result.rank_provenance
    assert result.collectives == {"all_reduce": 85}
    sizes = {g.name: g.size for g in result.process_groups}
    assert sizes == {"93825133359392": 8, "93825128099968": 1}


def test_broadcast_rows_give_the_root_not_the_rank() -> None:
    rows = [comms_values(0, "broadcast"), comms_values(3, "allreduce")]
    result = inspect_bytes(execution_trace_with_rows(rows), "et.json")
    assert (result.rank, result.world_size) == (3, 8)
    only_root = inspect_bytes(execution_trace_with_rows([comms_values(0, "broadcast")]), "x")
    assert only_root.rank is None and only_root.world_size is None


def test_wait_rows_name_neither_rank_nor_collective() -> None:
    rows = [comms_values(6, "wait"), comms_values(6, "wait")]
    result = inspect_bytes(execution_trace_with_rows(rows), "et.json")
    assert result.rank is None and result.collectives == {}
    assert result.process_groups == ()


def test_old_layout_takes_the_largest_group_over_a_singleton_group() -> None:
    big = [[[1, 2, 0, 4, 2, "cuda:5"]], 337, 93825133359392, 5, "allreduce", [], [], 8]
    small = [[[1, 2, 0, 4, 2, "cuda:5"]], 5, 93825128099968, 0, "allreduce", [], [], 1]
    rows = [small, big, big, [337, 0, 0, "wait", [], [], 1]]
    result = inspect_bytes(execution_trace_with_rows(rows, old_layout=True), "m.json")
    assert (result.rank, result.world_size) == (5, 8)
    assert result.rank_provenance is not None
    assert "largest group" in result.rank_provenance and "100001" in result.rank_provenance


def test_a_subgroup_rank_is_mapped_through_its_start_and_stride() -> None:
    # Rank 1 of the group {1, 3, 5, 7} (start 1, stride 2) is global rank 3.
    rows = [comms_values(1, "allgather", pg=("4", "tp"), world_size=4, start=1, stride=2)]
    result = inspect_bytes(execution_trace_with_rows(rows), "et.json")
    assert result.rank == 3
    assert result.rank_provenance is not None and "global rank 3" in result.rank_provenance


def test_a_row_cut_by_the_scan_window_is_read_whole() -> None:
    # Enough compute nodes to push the record_param_comms row past the first 4 MiB window.
    data = execution_trace_with_rows([comms_values(2, "allreduce")], padding=45_000)
    assert len(data) > 4 * 1024 * 1024
    result = inspect_bytes(data, "et.json")
    assert result.status == "complete", result.reason
    assert (result.rank, result.world_size) == (2, 8)


def test_quick_mode_stops_at_the_first_default_group_row() -> None:
    rows = [comms_values(4, "allreduce")]
    data = execution_trace_with_rows(rows)
    padded = data.replace(b'"finish_ts"', b'"pad": "' + b"x" * 9_000_000 + b'", "finish_ts"')
    result = inspect_bytes(padded, "et.json", quick=True)
    assert (result.rank, result.scan) == (4, "quick")
    assert result.bytes_scanned < len(padded) / 2
    assert inspect_bytes(padded, "et.json").bytes_scanned == len(padded)


def test_pg_init_node_gives_world_size_and_groups() -> None:
    pg = json.dumps(
        [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
          "ranks": [], "group_size": 4, "group_count": 1}]
    )  # fmt: skip
    data = execution_trace_with_rows([comms_values(1, world_size=4)]).replace(
        b'"nodes": [\n',
        b'"nodes": [\n    '
        + json.dumps(
            {"id": 3, "name": "## process_group:init ##", "inputs": {"values": [pg]}}
        ).encode()
        + b",\n",
    )
    result = inspect_bytes(data, "et.json")
    assert (result.rank, result.world_size, result.backend) == (1, 4, "nccl")
    assert [g.description for g in result.process_groups] == ["default_pg"]


# --- provenance of every rank --------------------------------------------------------


def test_every_rank_source_has_its_provenance(tmp_path: Path) -> None:
    kineto = inspect_path(TESTDATA / "kineto-dlrm-8ranks" / KINETO_RANK3)
    assert (kineto.rank_source, kineto.rank_provenance) == (
        "distributedInfo",
        'distributedInfo {"rank": 3, "world_size": 8}',
    )
    chakra = inspect_path(
        TESTDATA / "chakra-allreduce-4ranks" / "all_reduce.2.et", "all_reduce.2.et"
    )
    assert (chakra.rank_source, chakra.rank_provenance) == (
        "filename",
        "file name all_reduce.2.et (<prefix>.<rank>.et)",
    )
    archive = tmp_path / "set.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.write(TESTDATA / "chakra-allreduce-4ranks" / "all_reduce.2.et", "run/all_reduce.2.et")
    member = inspect_path(archive).members[0]
    assert (member.rank, member.rank_source, member.rank_provenance) == (
        2,
        "memberName",
        "archive member name run/all_reduce.2.et (<prefix>.<rank>.et)",
    )
    assert FileInspection.from_json(member.to_json()) == member
