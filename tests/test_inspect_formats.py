"""The facts of each trace format against the real samples' oracle (tests/data/SOURCES.md)
and synthetic files built for each rule: ranks and their provenance, world sizes, process
groups, headers and collectives."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.inspect_fixtures import (
    chakra_allreduce,
    chakra_metadata_attrs,
    chakra_node,
    chakra_old_converter_calls,
    chakra_trace,
    comms_values,
    delimited,
    execution_trace_with_rows,
    old_comms_values,
)
from tests.support.paths import TESTDATA
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


def test_seven_slot_rows_give_the_rank_on_the_group_of_the_highest_rank() -> None:
    # Schema 1.0.1 from PyTorch before 2.2: no group size. Rank 5 on the world's group, and
    # rank 1 of its pair {4, 5} in more rows: a rank within a group is never above the world's.
    world, pair = 94251230035200, 94251230099968
    rows = [old_comms_values(1, pg_ptr=pair)] * 3 + [old_comms_values(5, pg_ptr=world)]
    rows += [old_comms_values(0, "broadcast", pg_ptr=world), old_comms_values(5, "wait")]
    result = inspect_bytes(execution_trace_with_rows(rows, old_layout=True), "et.json")
    assert (result.rank, result.world_size, result.rank_source) == (5, None, "record_param_comms")
    assert result.rank_provenance == (
        f'record_param_comms node 100003: rank 5 in allreduce on process group "{world}", '
        "the group of the highest rank, no group size recorded (1 rows)"
    )
    assert [(g.name, g.size) for g in result.process_groups] == [
        (str(pair), None),
        (str(world), None),
    ]


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


# --- Chakra protobuf: headers that start with attributes, comm_type ----------------------

CHAKRA_3PG = TESTDATA / "chakra-et-allreduce-3pg-2ranks"
CHAKRA_STG = TESTDATA / "chakra-et-stg-dp2tp2-4ranks"


@pytest.mark.parametrize("rank", [0, 1])
def test_real_chakra_header_of_attributes_gives_schema_pid_and_the_inside_rank(rank: int) -> None:
    name = f"chakra_trace.{rank}.et"
    result = inspect_path(CHAKRA_3PG / name, name)
    assert result.status == "complete", result.reason
    assert result.node_counts == {"COMP_NODE": 1632, "COMM_COLL_NODE": 2}  # no INVALID_NODE
    assert result.schema_version == "1.1.1-chakra.0.0.4"
    assert result.pid == 2461700 + rank
    assert result.attributes["time"] == "2025-08-24 16:09:24"
    assert result.attributes["start_ts"] == (9412067236, 9412067242)[rank]
    assert (result.rank, result.world_size, result.rank_source) == (rank, 2, "record_param_comms")
    assert result.rank_provenance is not None
    assert result.rank_provenance.endswith(f"the file name {name} (<prefix>.<rank>.et) agrees")
    assert result.collectives == {"all_reduce": 2}
    assert result.collective_bytes == {"all_reduce": 2 * 4294967296}
    assert {g.name for g in result.process_groups} == {"1", "2"}


@pytest.mark.parametrize("rank", range(4))
def test_real_generated_chakra_counts_no_spurious_node(rank: int) -> None:
    name = f"denseA.{rank}.et"
    result = inspect_path(CHAKRA_STG / name, name)
    assert result.node_counts == {"COMP_NODE": 43, "COMM_COLL_NODE": 15}
    assert result.schema_version == "symbolic_tensor_network"
    assert result.attributes == {"schema": "symbolic_tensor_network"}
    assert (result.rank, result.rank_source, result.pid) == (rank, "filename", None)
    assert result.collectives == {"all_gather": 6, "reduce_scatter": 4, "all_reduce": 5}


def test_header_starting_with_attributes_is_metadata_not_a_node() -> None:
    header = chakra_metadata_attrs({"schema": "1.0.2-chakra.0.0.4", "pid": 77, "ngpus": 8})
    data = header + chakra_allreduce()
    result = inspect_bytes(data, "trace.json")  # recognised without a .et name
    assert result.format == "chakra_et"
    assert result.node_counts == {"COMM_COLL_NODE": 1}
    assert (result.schema_version, result.pid) == ("1.0.2-chakra.0.0.4", 77)
    assert result.attributes == {"schema": "1.0.2-chakra.0.0.4", "pid": 77, "ngpus": 8}
    with_version = chakra_metadata_attrs({"ngpus": 4}, version="0.0.4") + chakra_allreduce()
    result = inspect_bytes(with_version, "t.3.et")
    assert (result.schema_version, result.attributes) == ("0.0.4", {"ngpus": 4})


def test_missing_comm_type_is_unknown_not_all_reduce() -> None:
    node = delimited(chakra_node(1, "coll", 7, {"is_cpu_op": False, "comm_size": 64}))
    result = inspect_bytes(chakra_trace(node + chakra_allreduce(comm_type=0)), "x.0.et")
    assert result.collectives == {"all_reduce": 1, "unknown": 1}
    assert result.collective_bytes == {"all_reduce": 1_048_576, "unknown": 64}


RESNET_CALLS = ["broadcast", "broadcast"] + ["allreduce"] * 5


def test_a_call_typed_on_its_host_ops_and_its_kernel_counts_once() -> None:
    # The older converter typed c10d::allreduce_ and nccl:all_reduce COMM_COLL_NODE too,
    # without comm_type: the kernel's node counts the call, they do not.
    result = inspect_bytes(chakra_trace(chakra_old_converter_calls(RESNET_CALLS)), "eg.0.et")
    assert result.node_counts == {"COMM_COLL_NODE": 21, "COMP_NODE": 7}
    assert result.collectives == {"broadcast": 2, "all_reduce": 5}
    assert result.collective_bytes == {"broadcast": 2 * 102760448, "all_reduce": 5 * 102760448}
    assert (result.rank, result.world_size) == (0, 2)
    # Without the kernels the host ops count, by name and one kind of them only.
    host_only = chakra_trace(chakra_old_converter_calls(RESNET_CALLS, gpu=False))
    result = inspect_bytes(host_only, "eg.0.et")
    assert result.node_counts == {"COMM_COLL_NODE": 14, "COMP_NODE": 7}
    assert result.collectives == {"broadcast": 2, "all_reduce": 5}


def test_inside_rank_disagreeing_with_the_name_is_said() -> None:
    row = "[[[15, 5, 0, 4, 4, 'cuda:3']], [1, False], ['0', 'default_pg'], 3, 'allreduce', "
    row += "[], [], 0, 1, 4]"
    node = delimited(chakra_node(9, "record_param_comms", 4, io_values=row))
    result = inspect_bytes(chakra_trace(node), "run.1.et")
    assert (result.rank, result.world_size) == (3, 4)
    assert result.rank_provenance is not None
    assert result.rank_provenance.endswith("the file name run.1.et (<prefix>.<rank>.et) says 1")


# --- Chakra JSON -------------------------------------------------------------------------

CHAKRA_JSON = TESTDATA / "chakra-json-stg-jsonized"


def chakra_json_node(
    node_id: int, node_type: str, comm_type: str | None = None
) -> dict[str, object]:
    attr: list[dict[str, object]] = [{"name": "is_cpu_op", "boolVal": False}]
    if comm_type is not None:
        attr += [
            {"name": "comm_type", "int64Val": comm_type},
            {"name": "comm_size", "int64Val": "1024"},
        ]
    return {"id": str(node_id), "name": f"n{node_id}", "type": node_type, "attr": attr}


def test_real_jsonized_chakra_is_read_as_chakra_json() -> None:
    result = inspect_path(CHAKRA_JSON / "j0_0.json", "j0_0.json")
    assert (result.format, result.status) == ("chakra_json", "complete"), result.reason
    assert result.node_counts == {"COMP_NODE": 2492, "COMM_COLL_NODE": 802}
    assert result.collectives == {"all_gather": 480, "reduce_scatter": 320, "all_reduce": 2}
    assert (result.schema_version, result.attributes) == (
        "symbolic_tensor_network",
        {"schema": "symbolic_tensor_network"},
    )
    assert (result.rank, result.rank_source, result.world_size) == (0, "filename", None)
    small = inspect_path(CHAKRA_JSON / "j1_0.json", "j1_0.json")
    assert (small.format, small.schema_version, small.node_counts) == (
        "chakra_json",
        "0.0.4",
        {"COMP_NODE": 1},
    )
    assert small.rank == 0


@pytest.mark.parametrize("form", ["workload_graph", "array", "concatenated"])
def test_every_chakra_json_form_counts_nodes(form: str) -> None:
    nodes = [chakra_json_node(1, "COMP_NODE"), chakra_json_node(2, "COMM_COLL_NODE", "2")]
    nodes.append(chakra_json_node(3, "COMM_COLL_NODE"))  # no comm_type: unknown
    if form == "workload_graph":
        data = json.dumps({"workload_graph": nodes}, indent=2).encode()
    elif form == "array":
        data = json.dumps(nodes).encode()
    else:
        data = b"".join(json.dumps(o, indent=2).encode() for o in [{"version": "0.0.4"}, *nodes])
    result = inspect_bytes(data, "llama.3.json")
    assert (result.format, result.status) == ("chakra_json", "complete"), result.reason
    assert result.node_counts == {"COMP_NODE": 1, "COMM_COLL_NODE": 2}
    assert result.collectives == {"all_gather": 1, "unknown": 1}
    assert (result.rank, result.rank_provenance) == (
        3,
        "file name llama.3.json (<prefix>.<rank>.json or <prefix>_<rank>.json)",
    )


def test_chakra_json_counts_a_call_typed_on_its_host_ops_and_its_kernel_once() -> None:
    nodes: list[dict[str, object]] = [
        {"id": "1", "name": "c10d::allreduce_", "type": "COMM_COLL_NODE"},
        {"id": "2", "name": "nccl:all_reduce", "type": "COMM_COLL_NODE"},
        {"id": "4", "name": "c10d::broadcast_", "type": "COMM_COLL_NODE"},
        {"id": "5", "name": "nccl:broadcast", "type": "COMM_COLL_NODE"},
    ]
    result = inspect_bytes(json.dumps({"workload_graph": nodes}).encode(), "t.0.json")
    assert result.collectives == {"all_reduce": 1, "broadcast": 1}  # by name, once each
    nodes += [
        chakra_json_node(3, "COMM_COLL_NODE", "0"),
        chakra_json_node(6, "COMM_COLL_NODE", "5"),
    ]
    result = inspect_bytes(json.dumps({"workload_graph": nodes}).encode(), "t.0.json")
    assert result.collectives == {"all_reduce": 1, "broadcast": 1}  # by the typed nodes


def feeder_node(node_id: int, name: str, node_type: int, **comm: int) -> dict[str, object]:
    """A node as Chakra's feeder reads ``workload_graph`` JSON (json_node.cpp): flat keys."""
    node: dict[str, object] = {"Id": node_id, "Name": name, "NodeType": node_type}
    node |= {"is_cpu_op": node_type == 4, "runtime": 120, "data_deps": [node_id - 1]}
    return node | comm


def test_feeder_json_nodes_with_integer_node_types_are_counted() -> None:
    nodes = [
        feeder_node(1, "embedding_fwd", 4),
        feeder_node(2, "allreduce_grad", 7, comm_type=0, comm_size=1048576, comm_priority=0),
        feeder_node(3, "mlp_fwd", 4),
        feeder_node(4, "all_to_all_emb", 7, comm_type=6, comm_size=65536),
        feeder_node(5, "allgather_params", 7, comm_type=2, comm_size=4096),
    ]
    data = json.dumps({"workload_graph": nodes}, indent=4).encode()
    result = inspect_bytes(data, "dlrm.2.json")
    assert (result.format, result.status) == ("chakra_json", "complete"), result.reason
    assert result.node_counts == {"COMP_NODE": 2, "COMM_COLL_NODE": 3}
    assert result.collectives == {"all_reduce": 1, "all_to_all": 1, "all_gather": 1}
    assert result.collective_bytes == {
        "all_reduce": 1048576,
        "all_to_all": 65536,
        "all_gather": 4096,
    }
    assert result.rank == 2


@pytest.mark.slow
def test_chakra_json_larger_than_a_chunk_and_truncated() -> None:
    nodes = [chakra_json_node(i, "COMM_COLL_NODE", "0") for i in range(40_000)]
    data = b"".join(json.dumps(o, indent=2).encode() for o in [{"version": "0.0.4"}, *nodes])
    assert len(data) > 4 * 1024 * 1024
    result = inspect_bytes(data, "big_7.json")
    assert result.status == "complete", result.reason
    assert result.collectives == {"all_reduce": 40_000} and result.rank == 7
    cut = inspect_bytes(data[:-10], "big_7.json")
    assert cut.status == "failed" and cut.reason is not None
    assert cut.reason.startswith("truncated")
    assert cut.collectives == {"all_reduce": 39_999}
    wrapped = json.dumps({"workload_graph": nodes[:3]}).encode()
    assert inspect_bytes(wrapped[:-1], "w.json").status == "failed"


# --- Kineto: pid and wait; archives: AppleDouble members --------------------------------

KINETO_HEAD = (
    b'{\n  "schemaVersion": 1,\n'
    b'  "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2},\n'
    b'  "traceEvents": [\n'
)


def kineto_events(*events: str) -> bytes:
    return KINETO_HEAD + ",\n".join(events).encode() + b"\n  ]\n}\n"


@pytest.mark.parametrize("quick", [False, True])
def test_real_kineto_pid_is_the_cpu_process(quick: bool) -> None:
    for rank, path in enumerate(sorted((TESTDATA / "kineto-dlrm-8ranks").glob("worker*"))):
        assert inspect_path(path, quick=quick).pid == 59811 + rank


def test_kineto_pid_skips_gpu_events_and_takes_either_key_order() -> None:
    gpu = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1}'
    cpu = '{"ph": "X", "pid": 4321, "tid": 1, "cat": "cpu_op", "name": "aten::mm", "ts": 2}'
    assert inspect_bytes(kineto_events(gpu, cpu), "t.json").pid == 4321
    assert inspect_bytes(kineto_events(gpu), "t.json").pid is None


def test_kineto_wait_is_no_collective_as_in_execution_traces() -> None:
    def comms(name: str, ts: int) -> str:
        return (
            '{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 9, "tid": 1, '
            f'"ts": {ts}, "dur": 1, "args": {{"Collective name": "{name}", "Group size": 2}}}}'
        )

    data = kineto_events(comms("allreduce", 1), comms("wait", 2), comms("wait", 3))
    result = inspect_bytes(data, "t.json")
    assert result.collectives == {"all_reduce": 1}
    assert result.collective_events == {"record_param_comms": 3}
    et = inspect_bytes(
        execution_trace_with_rows([comms_values(1), comms_values(1, "wait")]), "e.json"
    )
    assert "wait" not in et.collectives


def test_apple_double_members_are_not_traces(tmp_path: Path) -> None:
    archive = tmp_path / "set.zip"
    sample = TESTDATA / "chakra-allreduce-4ranks" / "all_reduce.0.et"
    with zipfile.ZipFile(archive, "w") as out:
        out.write(sample, "run/all_reduce.0.et")
        out.writestr("run/._all_reduce.0.et", b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X")
        out.writestr("__MACOSX/run/._all_reduce.0.et", b"\x00\x05\x16\x07")
    assert [m.name for m in inspect_path(archive).members] == ["run/all_reduce.0.et"]
    tarred = tmp_path / "set.tar"
    with tarfile.open(tarred, "w") as out:
        out.add(sample, "run/all_reduce.0.et")
        info = tarfile.TarInfo("run/._all_reduce.0.et")
        info.size = 4
        out.addfile(info, io.BytesIO(b"\x00\x05\x16\x07"))
    assert [m.name for m in inspect_path(tarred).members] == ["run/all_reduce.0.et"]


# --- process groups of Chakra traces and ASTRA-sim comm-group files -----------------------

STG_GROUPS = {
    0: {"3": {"all_gather": 6, "reduce_scatter": 4, "all_reduce": 2}, "1": {"all_reduce": 3}},
    1: {"4": {"all_gather": 6, "reduce_scatter": 4, "all_reduce": 2}, "1": {"all_reduce": 3}},
    2: {"3": {"all_gather": 6, "reduce_scatter": 4, "all_reduce": 2}, "2": {"all_reduce": 3}},
    3: {"4": {"all_gather": 6, "reduce_scatter": 4, "all_reduce": 2}, "2": {"all_reduce": 3}},
}


@pytest.mark.parametrize("rank", range(4))
def test_real_chakra_lists_the_groups_its_collectives_run_on(rank: int) -> None:
    result = inspect_path(CHAKRA_STG / f"denseA.{rank}.et", f"denseA.{rank}.et")
    assert {g.name: dict(g.collectives) for g in result.process_groups} == STG_GROUPS[rank]


def test_real_comm_group_files_list_their_members() -> None:
    result = inspect_path(CHAKRA_3PG / "comm_group.json")
    assert result.format == "comm_groups"
    assert [(g.name, g.ranks) for g in result.process_groups] == [
        ("0", (0, 1)),
        ("1", (0, 1)),
        ("2", (0, 1)),
    ]
    stg = inspect_path(CHAKRA_STG / "denseA.json")
    assert {g.name: g.ranks for g in stg.process_groups}["3"] == (0, 2)
    traces = inspect_path(CHAKRA_3PG / "chakra_trace.1.et", "chakra_trace.1.et")
    assert {g.name: dict(g.collectives) for g in traces.process_groups} == {
        "1": {"all_reduce": 1},
        "2": {"all_reduce": 1},
    }
    assert inspect_bytes(b'{"a": [0, 1]}', "x.json").format == "unknown"
    assert inspect_bytes(b'{"0": [0, -1]}', "x.json").format == "unknown"
