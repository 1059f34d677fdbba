"""Write the traces of this folder: a 4-rank DDP job on the CPU (gloo), profiled.

Run with a PyTorch of its own (never a dependency of tracestore)::

    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0
    /tmp/torchvenv/bin/python tests/data/pytorch213-ddp-gloo-4ranks/generate.py

Two runs, each 4 processes on 127.0.0.1 with the gloo backend, a tiny model wrapped in
DistributedDataParallel and 3 steps under ``torch.profiler`` (CPU activity) with the
execution-trace observer, steps 2 and 3 recorded (schedule wait 0, warmup 1, active 2):

- ``ddp/``: plain DDP (declared dp=4); every rank writes ``rank<r>.et.json`` (execution trace)
  and ``rank<r>.kineto.json`` (Kineto trace), gzipped.
- ``subgroups/``: the same, after ``dist.new_group([0, 1])`` and ``dist.new_group([2, 3])``;
  each step also all-reduces a small tensor on the rank's group of two.
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

WORLD = 4
STEPS = 3
HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(rank: int, port: int, out: str, subgroups: bool) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    pair = None
    if subgroups:
        # Every rank takes part in creating every group, as torch.distributed requires.
        groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        pair = groups[rank // 2]
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    et_path, kineto_path = Path(out) / f"rank{rank}.et.json", Path(out) / f"rank{rank}.kineto.json"
    observer = ExecutionTraceObserver().register_callback(str(et_path))
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=STEPS - 1),
        execution_trace_observer=observer,
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(kineto_path)),
    ) as prof:
        for step in range(STEPS):
            inputs = torch.randn(4, 8, generator=torch.Generator().manual_seed(step * WORLD + rank))
            loss = model(inputs).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if pair is not None:
                dist.all_reduce(torch.ones(4), group=pair)
            prof.step()
    observer.unregister_callback()
    dist.barrier()
    dist.destroy_process_group()


def generate(folder: Path, subgroups: bool) -> None:
    """Run one job and write its gzipped traces into ``folder``."""
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_run, args=(_free_port(), out, subgroups), nprocs=WORLD, join=True)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for path in sorted(Path(out).iterdir()):
            target = (folder / f"{path.name}.gz").open("wb")
            # No name or time in the gzip header: the same traces give the same bytes.
            with target, gzip.GzipFile(fileobj=target, mode="wb", filename="", mtime=0) as dst:
                dst.write(path.read_bytes())


if __name__ == "__main__":
    print(f"torch {torch.__version__}", file=sys.stderr)
    generate(HERE / "ddp", subgroups=False)
    generate(HERE / "subgroups", subgroups=True)
