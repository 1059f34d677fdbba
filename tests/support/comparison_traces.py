"""Synthetic runs for the comparison tests: ranks whose steps launch the kernels given."""

from __future__ import annotations

from pathlib import Path

from tests.support.kineto_traces import TraceBuilder

GEMM = "void gemm_kernel<float, 128>(float const*, float*, int)"
RELU = "relu_kernel(float*, int)"
SOFTMAX = "softmax_kernel(float*, int)"
ADAM = "adam_kernel(float*, int)"
ALL_REDUCE = "ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

Steps = list[list[tuple[str, int]]]


def run(rank: int | None, steps: Steps, *, world: int = 8, first_step: int = 1) -> TraceBuilder:
    """A rank whose step k (numbered from ``first_step``) launches ``steps[k]``'s (name,
    µs) kernels one after the other, communication on its own stream, whole µs; with a
    negative ``first_step``, no ProfilerStep at all."""
    t = TraceBuilder(rank, world=world)
    now = 1000
    for index, kernels in enumerate(steps):
        start = now
        for name, dur in kernels:
            stream = 20 if name.startswith("nccl") else 7
            t.device(name, now + 3, dur, stream=stream, launch=now + 1)
            now += dur + 5
        now += 20
        if first_step >= 0:
            t.step(first_step + index, start, now - start)
        now += 10
    return t


def write_run(path: Path, rank: int | None, steps: Steps, **kw: int) -> Path:
    """``run`` written to ``path``."""
    return run(rank, steps, **kw).write(path)


BASE: Steps = [
    [(GEMM, 50), (RELU, 10), (ALL_REDUCE, 100), (ADAM, 7)],
    [(GEMM, 52), (RELU, 10), (RELU, 12), (ALL_REDUCE, 90), (ADAM, 7)],
    [(GEMM, 51), (RELU, 11), (ALL_REDUCE, 95), (ADAM, 7)],
]
# The other run: GEMM slower, one RELU fewer, SOFTMAX new, ADAM gone, ALL_REDUCE faster.
OTHER: Steps = [
    [(GEMM, 70), (RELU, 10), (SOFTMAX, 20), (ALL_REDUCE, 80)],
    [(GEMM, 72), (RELU, 10), (SOFTMAX, 21), (ALL_REDUCE, 80)],
    [(GEMM, 71), (RELU, 11), (SOFTMAX, 22), (GEMM, 5), (ALL_REDUCE, 85)],
]
