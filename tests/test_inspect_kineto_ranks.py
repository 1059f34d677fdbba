"""A Kineto trace without ``distributedInfo`` still names its rank: in the ``Rank`` argument
of its ``record_param_comms`` events, or in a conventional file name (issue 43, item 11).
Either one is read with its provenance, and never above a ``distributedInfo`` rank."""

from __future__ import annotations

import gzip
import io
import json
from typing import Any

import pytest

from tracestore.inspect import FileInspection, inspect_file, rank_census


def _comms(rank: int, description: str, ranks: list[int], name: str = "allreduce") -> Any:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": "record_param_comms",
        "pid": 7,
        "tid": 7,
        "ts": 10,
        "dur": 5,
        "args": {
            "External id": 3,
            "Collective name": name,
            "In msg nelems": 1024,
            "Group size": len(ranks),
            "dtype": "Float",
            "Process Group Name": "0" if description == "default_pg" else "3",
            "Process Group Description": description,
            "Process Group Ranks": json.dumps(ranks),
            "Rank": rank,
        },
    }


def _trace(*events: Any, info: Any = None) -> bytes:
    top: dict[str, Any] = {"schemaVersion": 1}
    if info is not None:
        top["distributedInfo"] = info
    top["traceEvents"] = list(events)
    return json.dumps(top).encode()


def _inspect(data: bytes, name: str = "trace.json", quick: bool = False) -> FileInspection:
    return inspect_file(lambda: io.BytesIO(data), name, quick=quick)


@pytest.mark.parametrize("quick", [False, True])
def test_the_rank_of_record_param_comms_on_the_default_group(quick: bool) -> None:
    data = _trace(*[_comms(1, "default_pg", [0, 1]) for _ in range(3)])
    found = _inspect(data, quick=quick)
    assert (found.rank, found.rank_source) == (1, "record_param_comms")
    assert found.rank_provenance == (
        'record_param_comms event: rank 1 in allreduce on process group "0" (default_pg, '
        "size 2), the default group (1 rows)"  # the first on the default group decides
    )
    assert found.world_size == 2


def test_a_group_rank_is_mapped_to_the_world_through_the_groups_ranks() -> None:
    # Rank 1 of the group of ranks [2, 3]: rank 3 in the world.
    found = _inspect(_trace(_comms(1, "undefined", [2, 3])))
    assert found.rank == 3
    assert found.rank_provenance is not None
    assert "rank 1 (global rank 3) in allreduce" in found.rank_provenance


def test_distributed_info_comes_first() -> None:
    data = _trace(_comms(1, "default_pg", [0, 1]), info={"rank": 5, "world_size": 8})
    found = _inspect(data)
    assert (found.rank, found.rank_source) == (5, "distributedInfo")


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("worker1.1700000000123.pt.trace.json.gz", 1),
        ("traces/rank3.kineto.json.gz", 3),
        ("eg.rank_0.pt.trace.json", 0),
        ("rank-12.Jun_01_2024.pt.trace.json", 12),
        ("myhost_12345.1700000000123.pt.trace.json", None),
        ("worker-0_4242.1700.pt.trace.json", None),  # a host named worker-0, process 4242
        ("rank_0.json", None),  # no profiler's name: an only file may hold every rank
    ],
)
def test_a_conventional_file_name_gives_the_rank(name: str, rank: int | None) -> None:
    data = _trace({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "ts": 1, "dur": 1})
    if name.endswith(".gz"):
        data = gzip.compress(data)
    found = _inspect(data, name)
    assert found.rank == rank
    if rank is not None:
        assert found.rank_source == "filename"
        assert found.rank_provenance == f"file name {name} (rank<N> or worker<N> in the name)"


def test_the_arguments_come_before_the_name() -> None:
    found = _inspect(_trace(_comms(1, "default_pg", [0, 1])), "worker0.1.pt.trace.json")
    assert (found.rank, found.rank_source) == (1, "record_param_comms")


def test_a_set_of_such_files_passes_its_census() -> None:
    files = [
        (f"worker{rank}.1700000000.pt.trace.json.gz", _inspect(gzip.compress(_trace()), name))
        for rank in range(2)
        for name in [f"worker{rank}.1700000000.pt.trace.json.gz"]
    ]
    census = rank_census(files, declared_rank_count=2, workload_metadata=None)
    assert census.rank_count_matches.passed, census.rank_count_matches.message
