"""Synthetic Kineto traces for the analysis tests, written as PyTorch's profiler writes them.

``TraceBuilder`` adds host steps, launches and device events with the members Kineto gives
them; ``write`` renders the document in PyTorch's layout (``ph, cat, name, pid, tid`` on one
line, ``ts, dur`` on the next, ``args`` below) or as ``json.dumps`` would (other key order,
one line), optionally gzip- or zstd-compressed.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import zstandard

from tests.support.paths import TESTDATA

Number = int | float
Layout = Literal["pytorch", "compact"]
HOST_PID, HOST_TID = 4242, 4242


class TraceBuilder:
    """One rank's trace, event by event (times in µs)."""

    def __init__(self, rank: int | None = 0, world: int = 1) -> None:
        self.rank = rank
        self.world = world
        self.events: list[dict[str, Any]] = []
        self._correlation = 1000

    def host(self, name: str, ts: Number, dur: Number, cat: str = "cpu_op") -> None:
        """A host-side event."""
        self.events.append(_event("X", cat, name, HOST_PID, HOST_TID, ts, dur, {"External id": 1}))

    def step(self, number: int, ts: Number, dur: Number) -> None:
        """A host ``ProfilerStep#number``."""
        self.host(f"ProfilerStep#{number}", ts, dur, cat="user_annotation")

    def device(
        self,
        name: str,
        ts: Number,
        dur: Number,
        *,
        stream: int = 7,
        launch: Number | None = None,
        cat: str = "kernel",
        args: dict[str, Any] | None = None,
        launch_in_file: bool = True,
    ) -> int:
        """A device event launched at ``launch`` (default: 5 µs before it starts); its
        correlation. ``launch_in_file=False`` leaves the launch out of the trace."""
        self._correlation += 1
        correlation = self._correlation
        if launch_in_file:
            launched = ts - 5 if launch is None else launch
            self.events.append(
                _event(
                    "X",
                    "cuda_runtime",
                    "cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync",
                    HOST_PID,
                    HOST_TID,
                    launched,
                    1,
                    {"External id": correlation, "cbid": 211, "correlation": correlation},
                )
            )
        members: dict[str, Any] = {"External id": correlation}
        if cat == "kernel":
            members["queued"] = 0
        members.update({"device": 0, "context": 1, "stream": stream, "correlation": correlation})
        if cat == "kernel":
            members.update({"registers per thread": 32, "grid": [4, 1, 1], "block": [128, 1, 1]})
        else:
            members["bytes"] = 4096
        members.update(args or {})
        self.events.append(_event("X", cat, name, 0, stream, ts, dur, members))
        return correlation

    def memcpy(self, ts: Number, dur: Number, *, stream: int = 7, **kw: Any) -> int:
        """A ``gpu_memcpy``."""
        return self.device(
            "Memcpy HtoD (Pinned -> Device)", ts, dur, stream=stream, cat="gpu_memcpy", **kw
        )

    def memset(self, ts: Number, dur: Number, *, stream: int = 7, **kw: Any) -> int:
        """A ``gpu_memset``."""
        return self.device("Memset (Device)", ts, dur, stream=stream, cat="gpu_memset", **kw)

    def stream_sync(self, ts: Number, dur: Number, *, stream: int = 7) -> None:
        """A stream-bound ``cuda_sync`` (the GPU waiting, which HTA counts as busy)."""
        self._correlation += 1
        self.events.append(
            _event(
                "X",
                "cuda_sync",
                "Stream Sync",
                0,
                stream,
                ts,
                dur,
                {"correlation": self._correlation, "stream": stream, "device": 0},
            )
        )

    def trace(self) -> dict[str, Any]:
        """The document as a dict."""
        head: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}]}
        if self.rank is not None:
            head["distributedInfo"] = {
                "backend": "nccl",
                "rank": self.rank,
                "world_size": self.world,
            }
        return {**head, "traceEvents": self.events, "traceName": "synthetic"}

    def write(
        self,
        path: Path,
        layout: Layout = "pytorch",
        compression: Literal["gzip", "zstd"] | None = None,
    ) -> Path:
        """Write the trace; the path."""
        text = pytorch_json(self.trace()) if layout == "pytorch" else compact_json(self.trace())
        data = text.encode()
        if compression == "gzip":
            data = gzip.compress(data)
        elif compression == "zstd":
            data = zstandard.ZstdCompressor().compress(data)
        path.write_bytes(data)
        return path


def _event(
    ph: str, cat: str, name: str, pid: int, tid: int, ts: Number, dur: Number, args: dict[str, Any]
) -> dict[str, Any]:
    return {
        "ph": ph,
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def pytorch_json(trace: dict[str, Any]) -> str:
    """The document in the layout of PyTorch's profiler (Kineto's ``output_json``)."""
    head = [
        f'  "{key}": {json.dumps(value)}'
        for key, value in trace.items()
        if key not in ("traceEvents", "traceName")
    ]
    events = ",\n".join(_pytorch_event(event) for event in trace["traceEvents"])
    return (
        "{\n"
        + ",\n".join(head)
        + ',\n  "traceEvents": [\n'
        + events
        + "\n  ],\n"
        + f'  "traceName": {json.dumps(trace.get("traceName", ""))}\n'
        + "}\n"
    )


def _pytorch_event(event: dict[str, Any]) -> str:
    first = ", ".join(
        f'"{key}": {json.dumps(event[key])}'
        for key in ("ph", "cat", "name", "pid", "tid")
        if key in event
    )
    times = ", ".join(f'"{key}": {json.dumps(event[key])}' for key in ("ts", "dur") if key in event)
    args = event.get("args")
    lines = ["  {", f"    {first},", f"    {times}" + ("," if args is not None else "")]
    if args is not None:
        members = ",\n".join(f"      {json.dumps(k)}: {json.dumps(v)}" for k, v in args.items())
        lines.append('    "args": {\n' + members + "\n    }")
    lines.append("  }")
    return "\n".join(lines)


def compact_json(trace: dict[str, Any]) -> str:
    """The document as ``json.dumps`` writes it, each event's keys in another order."""
    events = [dict(sorted(event.items())) for event in trace["traceEvents"]]
    return json.dumps({**trace, "traceEvents": events})


DLRM = TESTDATA / "kineto-dlrm-8ranks"
_DLRM_INFO = re.compile(rb'"distributedInfo": \{"backend": "nccl", "rank": \d+, "world_size": 8\}')


def dlrm_ranks(count: int) -> dict[str, bytes]:
    """``count`` Kineto ranks made from the real DLRM sample's eight (``tests/data``): rank r
    is worker r % 8's trace with its distributedInfo saying rank r of ``count``; the file
    names are ``rank{r:04d}.pt.trace.json``."""
    samples = sorted(DLRM.iterdir())
    made = {}
    for rank in range(count):
        data = samples[rank % len(samples)].read_bytes()
        info = b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d}'
        data, found = _DLRM_INFO.subn(info % (rank, count), data)
        assert found == 1, samples[rank % len(samples)]
        made[f"rank{rank:04d}.pt.trace.json"] = data
    return made


def straggler_run(
    ranks: int = 8,
    steps: int = 6,
    *,
    slow: Mapping[int, float] | None = None,
    jitter: float = 0.0,
    offsets: Mapping[int, float] | None = None,
    collectives_per_step: int = 4,
    missing: tuple[int, int] | None = None,
    sequence: bool = True,
    seed: int = 45,
    collective: str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, ncclWork*)",
) -> list[TraceBuilder]:
    """A data-parallel run whose straggler is known: each step, every rank computes then
    joins ``collectives_per_step`` all-reduces; rank r computes ``slow[r]`` times as long
    (the others 1×, each stretch times 1 ± ``jitter`` at random); an all-reduce ends on every
    rank 200 µs after the last rank started it. ``offsets[r]`` shifts rank r's host clock
    (µs); ``missing=(rank, index)`` leaves that rank's index-th collective out of its trace;
    ``sequence`` records NCCL's ``Seq`` and process group in the kernels' args."""
    import random

    chance = random.Random(seed)
    slow, offsets = slow or {}, offsets or {}
    builders = [TraceBuilder(rank, ranks) for rank in range(ranks)]
    now = 1_000_000.0
    index = 0
    for step in range(steps):
        step_start = now
        ends = [now] * ranks
        phases = []
        for _ in range(collectives_per_step):
            starts = []
            for rank in range(ranks):
                stretch = 1000 * slow.get(rank, 1.0) * (1 + chance.uniform(-jitter, jitter))
                starts.append(ends[rank] + round(stretch))
            finish = max(starts) + 200
            phases.append((ends[:], starts, finish))
            ends = [finish] * ranks
        for rank, builder in enumerate(builders):
            shift = offsets.get(rank, 0.0)
            builder.step(step, step_start + shift, ends[rank] - step_start)
            for number, (begun, starts, finish) in enumerate(phases):
                at = index + number
                builder.device("gemm_kernel", begun[rank] + shift, starts[rank] - begun[rank])
                if missing == (rank, at):
                    continue
                args: dict[str, Any] = {"Collective name": "allreduce"}
                if sequence:
                    args.update({"Process Group Name": "0", "Seq": at})
                builder.device(
                    collective,
                    starts[rank] + shift,
                    finish - starts[rank],
                    stream=20,
                    args=args,
                )
        index += collectives_per_step
        now = ends[0] + 50
    return builders
