"""Synthetic traces for the inspector tests and ``bench/inspection.py``.

Kineto traces are written the way PyTorch writes them (pretty-printed events, ``distributedInfo``
before ``traceEvents``, optionally after it); Chakra traces with a small protobuf encoder, the
mirror of the decoder under test. A trace is ``head + block (+ ",\\n" + block)* + tail`` so a
benchmark can write gigabytes by repeating one block.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

from tests.support.paths import REPO
from tracestore.inspect import FileInspection, RankCensus, inspect_path, rank_census

InfoAt = Literal["head", "tail", "none"]

# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child would
# report the parent's peak.
_CHILD = """
import json, re, sys
from pathlib import Path
from tests.support.paths import REPO, TESTDATA
from tracestore.inspect import inspect_path
result = inspect_path(sys.argv[1])
status = Path("/proc/self/status").read_text()
peak_mib = int(re.search(r"VmHWM:\\s+(\\d+) kB", status)[1]) / 1024
print(json.dumps({"peakMib": peak_mib, "inspection": result.to_json()}))
"""


def inspect_in_child(path: Path, timeout: float) -> dict[str, Any]:
    """Inspect ``path`` in a child process of its own (bounded by ``timeout`` seconds):
    ``{"inspection": its JSON, "peakMib": the child's peak RSS}``."""
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )
    return dict(json.loads(child.stdout))


BASE_TS = 1694128201426556

# One block of events: 2 all_reduce and 1 all_to_all calls, each as PyTorch records them
# (record_param_comms CPU op, nccl:* annotation, NCCL kernel), among compute ops, runtime
# calls and their kernels, as in a profiled training step.
_COMPUTE = [
    ("cpu_op", "aten::linear", 0, 120, '"External id": 11, "Input Dims": [[512, 512], [512, 512]]'),
    ("cpu_op", "aten::addmm", 10, 100, '"External id": 12, "Input type": ["float", "float"]'),
    ("cuda_runtime", "cudaLaunchKernel", 20, 8, '"External id": 12, "correlation": 101'),
    ("kernel", "volta_sgemm_128x64_nn", 30, 95, '"device": 0, "stream": 7, "correlation": 101'),
    ("cpu_op", "aten::relu", 130, 20, '"External id": 13, "Input Dims": [[512, 512]]'),
    ("cuda_runtime", "cudaLaunchKernel", 135, 6, '"External id": 13, "correlation": 102'),
    (
        "kernel",
        "void at::native::vectorized_elementwise_kernel<4, at::native::relu_kernel>(int)",
        145,
        12,
        '"device": 0, "stream": 7, "correlation": 102',
    ),
    ("cpu_op", "aten::empty", 160, 3, '"External id": 14, "Input Dims": [[], [], []]'),
]
_COLLECTIVE = [
    ("cpu_op", "record_param_comms", 0, 40, '"External id": 15, "Input type": ["float"]'),
    ("user_annotation", "nccl:{op}", 5, 30, '"External id": 16'),
    (
        "kernel",
        "ncclKernel_{kernel}_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        10,
        300,
        '"device": 0, "stream": 20, "correlation": 16',
    ),
]


def _block_templates() -> list[tuple[str, str, int, int, str]]:
    events = []
    calls = [("all_reduce", "AllReduce"), ("all_reduce", "AllReduce"), ("all_to_all", "SendRecv")]
    for index in range(4):
        events += [(c, n, t + 200 * index, d, a) for c, n, t, d, a in _COMPUTE]
        if index < len(calls):
            op, kernel = calls[index]
            events += [
                (c, n.format(op=op, kernel=kernel), t + 200 * index + 170, d, a)
                for c, n, t, d, a in _COLLECTIVE
            ]
    return events


_EVENT_TEMPLATES = _block_templates()
BLOCK_COLLECTIVES = {"all_reduce": 2, "all_to_all": 1}
BLOCK_SPAN = (  # first ts and last ts + dur of a block, relative to its base
    min(t for _, _, t, _, _ in _EVENT_TEMPLATES),
    max(t + d for _, _, t, d, _ in _EVENT_TEMPLATES),
)


def _event(cat: str, name: str, ts: int, dur: int, args: str) -> str:
    return (
        f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": 4242, "tid": 4243,\n'
        f'    "ts": {ts}, "dur": {dur},\n    "args": {{\n      {args}\n    }}\n  }}'
    )


def kineto_block(base_ts: int = BASE_TS) -> bytes:
    """One block of events (no trailing comma)."""
    return ",\n".join(
        _event(c, n, base_ts + t, d, a) for c, n, t, d, a in _EVENT_TEMPLATES
    ).encode()


def distributed_info(rank: int | None, world_size: int | None, backend: str = "nccl") -> str:
    """The ``distributedInfo`` member (with a pg_config as recent PyTorch writes it)."""
    info: dict[str, object] = {"backend": backend}
    if rank is not None:
        info["rank"] = rank
    if world_size is not None:
        info["world_size"] = world_size
        info["pg_count"] = 1
        info["pg_config"] = [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": f"cuda:{backend}",
                "pg_size": world_size,
                "ranks": list(range(world_size)),
            }
        ]
    return f'  "distributedInfo": {json.dumps(info)},\n'


def kineto_parts(
    rank: int | None, world_size: int | None, *, info_at: InfoAt = "head"
) -> tuple[bytes, bytes, bytes]:
    """``(head, block, tail)`` of a Kineto trace; join blocks with ``b",\\n"``."""
    info = distributed_info(rank, world_size) if info_at != "none" else ""
    head = (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {"id": 0, "name": "Tesla V100"}\n'
        "  ],\n" + (info if info_at == "head" else "") + '  "traceEvents": [\n'
    )
    tail = (
        "\n  ],\n"
        + (info if info_at == "tail" else "")
        + '  "traceName": "synthetic.pt.trace.json"\n}\n'
    )
    return head.encode(), kineto_block(), tail.encode()


def kineto_trace(
    rank: int | None, world_size: int | None, *, info_at: InfoAt = "head", blocks: int = 3
) -> bytes:
    """A complete Kineto trace of ``blocks`` blocks of events."""
    head, block, tail = kineto_parts(rank, world_size, info_at=info_at)
    return head + b",\n".join([block] * blocks) + tail


def kineto_with_devices(count: int) -> tuple[bytes, list[str]]:
    """A Kineto trace whose ``deviceProperties`` names ``count`` distinct devices (and repeats
    the first, padded), as a hostile file would; the trace and the names."""
    names = [f"GPU {i:05d}" for i in range(count)]
    devices = [{"id": i, "name": name} for i, name in enumerate(names)]
    devices.append({"id": count, "name": f"  {names[0]} "})
    listed = '"deviceProperties": ' + json.dumps(devices, separators=(",", ":"))
    data = kineto_trace(0, 1).decode()
    data = data.replace('"deviceProperties": [\n    {"id": 0, "name": "Tesla V100"}\n  ]', listed)
    assert listed in data
    return data.encode(), names


CommRows = list[list[object]]


def comms_values(
    rank: int,
    collective: str = "allreduce",
    *,
    pg: tuple[str, str] = ("0", "default_pg"),
    world_size: int = 8,
    start: int = 0,
    stride: int = 1,
) -> list[object]:
    """The ``inputs.values`` of a record_param_comms node as PyTorch 2.x writes them."""
    tensors = [[[461, 462, 0, 53120, 4, f"cuda:{rank}"]]]
    if collective == "wait":
        return [31, ["", ""], rank, "wait", [], [], -1, -1, 1]
    return [*tensors, 31, list(pg), rank, collective, [], [], start, stride, world_size]


def old_comms_values(
    rank: int,
    collective: str = "allreduce",
    *,
    pg_ptr: int = 94251230035200,
    group_size: int | None = None,
) -> list[object]:
    """The ``inputs`` of a record_param_comms node as schema-1.0.1 PyTorch writes them: a
    group pointer and no group name; seven slots, the eighth (group size) from PyTorch 2.2 on."""
    tensors: list[object] = [[[1, 2, 0, 4, 2, f"cuda:{rank}"]]]
    if collective == "wait":
        tensors = []
    values = [*tensors, 337, pg_ptr, rank, collective, [], []]
    return values if group_size is None else [*values, group_size]


def execution_trace_with_rows(
    rows: CommRows, *, old_layout: bool = False, padding: int = 0, pid: int = 3974
) -> bytes:
    """An execution trace whose record_param_comms nodes hold ``rows`` (new layout: inputs
    ``{"values", "shapes", "types"}``; old: a bare list), after ``padding`` compute nodes."""
    nodes: list[dict[str, object]] = [
        {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 1}
    ]
    for i in range(padding):
        nodes.append({"id": 10 + i, "name": "aten::mm", "ctrl_deps": 2,
                      "inputs": {"values": [[1, 2, 0, 4, 4, "cuda:0"]], "shapes": [[2, 2]],
                                 "types": ["Tensor(float)"]}})  # fmt: skip
    for i, values in enumerate(rows):
        node: dict[str, object] = {"id": 100000 + i, "name": "record_param_comms"}
        if old_layout:
            node |= {"rf_id": i, "parent": 2, "inputs": values, "input_shapes": []}
        else:
            node |= {"ctrl_deps": 2, "inputs": {"values": values, "shapes": [], "types": []}}
        nodes.append(node)
    body = ",\n".join("    " + json.dumps(n) for n in nodes)
    schema = "1.0.1" if old_layout else "1.0.2-chakra.0.0.4"
    return (
        f'{{\n  "schema": "{schema}", "pid": {pid}, "time": "2024-04-18 09:53:29",'
        f' "start_ts": 2028842,\n  "nodes": [\n{body}\n  ],\n  "finish_ts": 2054197\n}}\n'
    ).encode()


def execution_trace_parts(rank: int, world_size: int) -> tuple[bytes, bytes, bytes]:
    """``(head, block, tail)`` of an execution trace; join blocks with ``b",\\n"``. A block
    is 30 compute nodes, an all-reduce on the default group (its ``nccl:all_reduce``
    annotation and record_param_comms row) and its wait, as in a DDP step."""
    compute = {
        "id": 10, "name": "aten::linear", "ctrl_deps": 2,
        "inputs": {"values": [[5, 6, 0, 262144, 4, f"cuda:{rank}"], [7, 8, 0, 262144, 4,
                   f"cuda:{rank}"], "<None>"], "shapes": [[512, 512], [512, 512], []],
                   "types": ["Tensor(float)", "Tensor(float)", "None"]},
        "outputs": {"values": [[9, 10, 0, 262144, 4, f"cuda:{rank}"]], "shapes": [[512, 512]],
                    "types": ["Tensor(float)"]},
        "attrs": [{"name": "rf_id", "type": "uint64", "value": 7},
                  {"name": "op_schema", "type": "string", "value": "aten::linear(Tensor input,"
                   " Tensor weight, Tensor? bias=None) -> Tensor"}],
    }  # fmt: skip
    nodes = [compute] * 30
    nodes.append({"id": 12, "name": "nccl:all_reduce", "ctrl_deps": 11})
    for values in (comms_values(rank, world_size=world_size), comms_values(rank, "wait")):
        nodes.append({"id": 11, "name": "record_param_comms", "ctrl_deps": 2,
                      "inputs": {"values": values, "shapes": [], "types": []}})  # fmt: skip
    block = ",\n".join("    " + json.dumps(n) for n in nodes).encode()
    head = (
        b'{\n  "schema": "1.0.2-chakra.0.0.4", "pid": 3974, "time": "2024-04-18 09:53:29",'
        b' "start_ts": 2028842,\n  "nodes": [\n'
    )
    return head, block, b'\n  ],\n  "finish_ts": 2054197\n}\n'


def execution_trace(world_size: int = 8) -> bytes:
    """A PyTorch execution trace with a process-group init node and two collectives."""
    pg = json.dumps(
        [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
          "ranks": [], "group_size": world_size, "group_count": 1}]
    )  # fmt: skip
    nodes = [
        {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 1},
        {"id": 3, "name": "## process_group:init ##", "ctrl_deps": 2,
         "inputs": {"values": [pg], "shapes": [[]], "types": ["String"]}},
        {"id": 5, "name": "record_param_comms", "ctrl_deps": 2},
        {"id": 6, "name": "nccl:all_reduce", "ctrl_deps": 5},
        {"id": 7, "name": "nccl:all_reduce", "ctrl_deps": 5},
    ]  # fmt: skip
    body = ",\n".join("    " + json.dumps(n) for n in nodes)
    return (
        '{\n  "schema": "1.1.1-chakra.0.0.4", "pid": 2784631, "time": "2025-04-11 13:43:51",'
        f' "start_ts": 2188364098,\n  "nodes": [\n{body}\n  ],\n  "finish_ts": 2188399999\n}}\n'
    ).encode()


# --- Chakra: a protobuf encoder, just enough for Node and GlobalMetadata -----------------

Attrs = dict[str, int | bool | str]
IOInfo = tuple[str, str, str]  # values, shapes, types


def varint(value: int) -> bytes:
    """Base-128 varint (negative values as 64-bit two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number: int, value: int) -> bytes:
    """A varint field."""
    return varint(number << 3) + varint(value)


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def attribute(name: str, value: int | bool | str) -> bytes:
    """An AttributeProto: bools as ``bool_val`` (27), ints ``int64_val`` (9), str (29)."""
    if isinstance(value, str):
        return field_bytes(1, name.encode()) + field_bytes(29, value.encode())
    number = 27 if isinstance(value, bool) else 9
    return field_bytes(1, name.encode()) + field_varint(number, int(value))


def chakra_node(
    node_id: int,
    name: str,
    node_type: int,
    attrs: Attrs | None = None,
    *,
    deps: tuple[int, ...] = (),
    data_deps: tuple[int, ...] = (),
    io_values: str = "",
    io: tuple[IOInfo, IOInfo] | None = None,
) -> bytes:
    """A Node message (without its length prefix), fields in field-number order."""
    msg = field_varint(1, node_id) if node_id else b""
    msg += field_bytes(2, name.encode()) + field_varint(3, node_type)
    if deps:
        msg += field_bytes(4, b"".join(varint(d) for d in deps))
    if data_deps:
        msg += field_bytes(5, b"".join(varint(d) for d in data_deps))
    msg += field_varint(7, 25) if node_type == 4 else b""
    if io_values:
        msg += field_bytes(8, field_bytes(1, io_values.encode()) + field_bytes(2, b"[[512,512]]"))
    for number, info in zip((8, 9), io or (), strict=False):
        msg += field_bytes(
            number, b"".join(field_bytes(i + 1, t.encode()) for i, t in enumerate(info))
        )
    for key, value in (attrs or {}).items():
        msg += field_bytes(10, attribute(key, value))
    return msg


def delimited(message: bytes) -> bytes:
    """A message with its varint length prefix, as Chakra files store them."""
    return varint(len(message)) + message


def chakra_metadata(version: str = "0.0.4") -> bytes:
    """A length-prefixed GlobalMetadata."""
    return delimited(field_bytes(1, version.encode()))


def chakra_metadata_attrs(attrs: Attrs, version: str = "") -> bytes:
    """A length-prefixed GlobalMetadata as newer writers make it: an empty ``version`` (left
    out) and attributes first."""
    body = field_bytes(1, version.encode()) if version else b""
    return delimited(b"".join(field_bytes(2, attribute(k, v)) for k, v in attrs.items()) + body)


def chakra_allreduce(size: int = 1_048_576, comm_type: int = 0) -> bytes:
    """A length-prefixed COMM_COLL_NODE like the astra-sim samples'."""
    attrs: Attrs = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size}
    return delimited(chakra_node(0, "all_reduce_4npus_1MB", 7, attrs))


def chakra_block(first_id: int = 1) -> bytes:
    """100 length-prefixed nodes: 90 compute, 6 all-reduce, 2 all-gather, 1 send, 1 recv."""
    out = bytearray()
    for i in range(100):
        node_id = first_id + i
        if i % 16 == 5 and i < 96:
            kind = 0 if i % 32 == 5 else 2
            attrs: Attrs = {"is_cpu_op": False, "comm_type": kind}
            attrs["comm_size"] = 4_194_304
            out += delimited(chakra_node(node_id, f"nccl:{i}", 7, attrs, deps=(node_id - 1,)))
        elif i in (98, 99):
            attrs = {"is_cpu_op": False, "comm_src": 0, "comm_dst": 1, "comm_size": 65536}
            out += delimited(chakra_node(node_id, "send_recv", 5 if i == 98 else 6, attrs))
        else:
            attrs = {"is_cpu_op": True, "num_ops": 3, "tensor_size": 1048576, "op_type": 2}
            io = "[[6,7,0,262144,4,'cuda:0']]"
            out += delimited(
                chakra_node(node_id, "aten::mm", 4, attrs, deps=(node_id - 1,), io_values=io)
            )
    return bytes(out)


_CPU_IO = (
    (
        "[[6,7,0,262144,4,'cuda:0'],[8,9,0,524288,4,'cuda:0'],'<None>']",
        "[[512,512],[1024,512],[]]",
        "['Tensor(float)','Tensor(float)','None']",
    ),
    ("[[10,11,0,524288,4,'cuda:0']]", "[[512,1024]]", "['Tensor(float)']"),
)
_KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)"
)
_NCCL = "ncclDevKernel_{}_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def chakra_converter_block(first_id: int = 1) -> bytes:
    """100 nodes shaped like Chakra's PyTorch converter output (about 350 bytes each).

    45 CPU ops with IO and profiler attributes, 45 GPU kernels, 8 collectives
    (4 all-reduce, 2 all-gather, 2 reduce-scatter), one send and one recv.
    """
    out = bytearray()
    kinds = {0: "AllReduce", 2: "AllGather", 7: "ReduceScatter"}
    collective_types = [0, 0, 2, 7, 0, 2, 7, 0]
    for i in range(100):
        node_id = first_id + i
        if i >= 90:
            if i < 98:
                comm_type = collective_types[i - 90]
                attrs: Attrs = {"is_cpu_op": False, "comm_type": comm_type}
                attrs |= {"comm_size": 8_388_608, "pg_name": "0"}
                name = _NCCL.format(kinds[comm_type])
                out += delimited(chakra_node(node_id, name, 7, attrs, data_deps=(node_id - 1,)))
            else:
                attrs = {"is_cpu_op": False, "comm_src": 0, "comm_dst": 1, "comm_size": 65536}
                name = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
                out += delimited(chakra_node(node_id, name, 5 if i == 98 else 6, attrs))
        elif i % 2 == 0:
            attrs = {"rf_id": node_id, "fw_parent": 0, "seq_id": 1200 + i, "scope": 0}
            attrs |= {"tid": 1, "fw_tid": 0, "is_cpu_op": True}
            attrs["op_schema"] = (
                "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"
            )
            out += delimited(
                chakra_node(node_id, "aten::linear", 4, attrs, deps=(node_id - 2,), io=_CPU_IO)
            )
        else:
            attrs = {"is_cpu_op": False, "num_ops": 524288, "tensor_size": 2097152, "stream": 7}
            out += delimited(chakra_node(node_id, _KERNEL, 4, attrs, data_deps=(node_id - 1,)))
    return bytes(out)


def chakra_old_converter_calls(calls: list[str], *, gpu: bool = True) -> bytes:
    """Length-prefixed nodes as Chakra's older PyTorch converter (pytorch2chakra_converter)
    wrote each collective call: the host ops ``c10d::<op>_`` and ``nccl:<op>`` typed
    COMM_COLL_NODE without ``comm_type``, a record_param_comms COMP_NODE between them, and
    (with ``gpu``) the NCCL kernel, a COMM_COLL_NODE with ``comm_type`` and ``comm_size``."""
    out = bytearray()
    kernels = {
        "allreduce": ("all_reduce", "AllReduce", 0),
        "broadcast": ("broadcast", "Broadcast", 5),
    }
    node_id = 10
    for seq, call in enumerate(calls):
        op, kernel, comm_type = kernels[call]
        cpu: Attrs = {"rf_id": node_id, "seq_id": seq, "tid": 1, "is_cpu_op": True}
        row = f"[[[15, 5, 0, 4, 4, 'cuda:0']], {seq}, ['0', 'default_pg'], 0, '{call}', "
        row += "[], [], 0, 1, 2]"
        out += delimited(chakra_node(node_id, f"c10d::{call}_", 7, cpu, deps=(node_id - 1,)))
        out += delimited(chakra_node(node_id + 1, "record_param_comms", 4, cpu, io_values=row))
        out += delimited(chakra_node(node_id + 2, f"nccl:{op}", 7, cpu, deps=(node_id + 1,)))
        if gpu:
            attrs: Attrs = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": 102760448}
            name = f"ncclKernel_{kernel}_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
            out += delimited(chakra_node(node_id + 3, name, 7, attrs, data_deps=(node_id + 2,)))
        node_id += 4
    return bytes(out)


CONVERTER_BLOCK_NODES = {
    "COMP_NODE": 90,
    "COMM_COLL_NODE": 8,
    "COMM_SEND_NODE": 1,
    "COMM_RECV_NODE": 1,
}
CONVERTER_BLOCK_COLLECTIVES = {"all_reduce": 4, "all_gather": 2, "reduce_scatter": 2}
CHAKRA_BLOCK_NODES = {
    "COMP_NODE": 92,
    "COMM_COLL_NODE": 6,
    "COMM_SEND_NODE": 1,
    "COMM_RECV_NODE": 1,
}
CHAKRA_BLOCK_COLLECTIVES = {"all_reduce": 3, "all_gather": 3}


def chakra_trace(nodes: bytes = b"", version: str | None = "0.0.4") -> bytes:
    """Metadata (unless ``version`` is None) followed by ``nodes``."""
    return (chakra_metadata(version) if version is not None else b"") + nodes


def census_of(
    paths: list[Path], declared: int | None, metadata: object = None
) -> tuple[RankCensus, dict[str, FileInspection]]:
    files = [(p.name, inspect_path(p, p.name)) for p in paths]
    census = rank_census(files, declared_rank_count=declared, workload_metadata=metadata)
    json.dumps(census.to_json())  # always JSON-safe
    return census, dict(files)
