"""Benchmark: trace inspection against ``json.load``, in one run.

Writes synthetic traces of ``--size-mib`` MiB into a temporary directory (a Kineto JSON with
``distributedInfo`` at its head, the same with it at its tail, a PyTorch execution trace whose
rank is in its record_param_comms rows, a Chakra ``.et`` of nodes shaped like the PyTorch
converter's and one of small nodes), then times each measurement in a child process of its
own, so that each peak RSS (``ru_maxrss`` of that child) is that measurement's alone, and
prints a table with ratios to the ``json.load`` baseline of the same kind of file::

    .venv/bin/python bench/inspection.py --size-mib 64      # quick
    .venv/bin/python bench/inspection.py                    # 1 GiB, as reported
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if __name__ == "__main__":
    # Run as a script, bench/ heads sys.path; the repository root is what this imports from.
    sys.path.insert(0, str(REPO))

MIB = 1024 * 1024
RANK, WORLD = 3, 8


def _write_repeated(
    path: Path, head: bytes, block: bytes, tail: bytes, size: int, sep: bytes
) -> int:
    """Write ``head + block (sep block)* + tail`` of about ``size`` bytes; the block count."""
    per_batch = max(1, (8 * MIB) // (len(block) + len(sep)))
    blocks = max(1, (size - len(head) - len(tail)) // (len(block) + len(sep)))
    with path.open("wb") as out:
        out.write(head)
        written = 0
        while written < blocks:
            count = min(per_batch, blocks - written)
            if written:
                out.write(sep)
            out.write(sep.join([block] * count))
            written += count
        out.write(tail)
    return blocks


def write_kineto(path: Path, size: int, info_at: str) -> int:
    """A synthetic Kineto trace of rank 3 of 8; the number of event blocks."""
    from tests.support.inspect_fixtures import kineto_parts

    head, block, tail = kineto_parts(RANK, WORLD, info_at=info_at)  # type: ignore[arg-type]
    return _write_repeated(path, head, block, tail, size, b",\n")


def write_execution_trace(path: Path, size: int) -> int:
    """A synthetic execution trace of rank 3 of 8; the number of node blocks."""
    from tests.support.inspect_fixtures import execution_trace_parts

    head, block, tail = execution_trace_parts(RANK, WORLD)
    return _write_repeated(path, head, block, tail, size, b",\n")


def write_chakra(path: Path, size: int, converter_like: bool) -> tuple[int, float]:
    """A synthetic Chakra trace; ``(block count, mean node size in bytes)``."""
    from tests.support.inspect_fixtures import chakra_block, chakra_converter_block, chakra_metadata

    block = chakra_converter_block() if converter_like else chakra_block()
    return _write_repeated(path, chakra_metadata(), block, b"", size, b""), len(block) / 100


# --- measurements, each run in a child process ---------------------------------------


def measure(kind: str, path: Path) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; its timing, peak RSS and findings."""
    completed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure", kind, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise SystemExit(f"measurement {kind} failed:\n{completed.stderr}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def child(kind: str, path: Path) -> None:
    """The body of one measurement (runs in the child process)."""
    from tracestore.inspect import inspect_path  # imported before the clock starts

    started, cpu_started = time.perf_counter(), time.process_time()
    if kind == "json_load":
        with path.open("rb") as stream:
            document = json.load(stream)
        if "distributedInfo" in document:
            info = document["distributedInfo"]
            found: dict[str, Any] = {"rank": info["rank"], "worldSize": info["world_size"]}
        else:  # an execution trace: the first record_param_comms row
            row = next(n for n in document["nodes"] if n["name"] == "record_param_comms")
            values = row["inputs"]["values"]
            found = {"rank": values[3], "worldSize": values[-1]}
        del document
    else:
        inspection = inspect_path(path, path.name, quick=kind == "quick")
        found = inspection.to_json()
        found.pop("members")
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    peak = _peak_rss_mib()
    print(json.dumps({"seconds": seconds, "cpu": cpu, "peakRssMib": peak, "found": found}))


def _peak_rss_mib() -> float:
    """This process's peak RSS: VmHWM (Linux keeps ru_maxrss across fork and exec, so a
    child's ru_maxrss can be its parent's), else ru_maxrss."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# --- the run -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Generate the traces, measure, print the table; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="size of each trace")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the traces")
    parser.add_argument("--measure", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        child(args.measure[0], Path(args.measure[1]))
        return 0
    size = args.size_mib * MIB
    with tempfile.TemporaryDirectory(prefix="tracestore-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        print(f"writing {args.size_mib} MiB traces into {root} ...", flush=True)
        head, tail = root / "rank3.head.pt.trace.json", root / "rank3.tail.pt.trace.json"
        blocks = write_kineto(head, size, "head")
        write_kineto(tail, size, "tail")
        et = root / "rank3.et.json"
        et_blocks = write_execution_trace(et, size)
        converter, small = root / "converter.3.et", root / "small.3.et"
        _, converter_node = write_chakra(converter, size, converter_like=True)
        _, small_node = write_chakra(small, min(size, 256 * MIB), converter_like=False)
        runs = [
            ("json.load (baseline)", "kineto, info at head", "json_load", head, ""),
            ("inspect quick (rank, world)", "kineto, info at head", "quick", head, "quick"),
            ("inspect quick (rank, world)", "kineto, info at tail", "quick", tail, ""),
            ("inspect full", "kineto, info at tail", "full", tail, "full"),
            ("inspect full", "kineto, info at head", "full", head, "full"),
            ("json.load (baseline)", "et, rows throughout", "json_load", et, ""),
            ("inspect quick (rank, world)", "et, rows throughout", "quick", et, "quick"),
            ("inspect full", "et, rows throughout", "full", et, "full"),
            ("inspect full", f"chakra, {converter_node:.0f} B nodes", "full", converter, "chakra"),
            ("inspect full", f"chakra, {small_node:.0f} B nodes", "full", small, ""),
        ]
        results = []
        for label, what, kind, path, target in runs:
            print(f"  {label:<28} {what} ...", flush=True)
            results.append((label, what, path.stat().st_size, measure(kind, path), target))
    return report(results, blocks, et_blocks)


TARGETS = {
    "quick": "≥ 10× json.load",
    "full": "≥ 1× json.load, < 100 MiB",
    "chakra": "≥ 50 MB/s",
}


def report(
    results: list[tuple[str, str, int, dict[str, Any], str]], kineto_blocks: int, et_blocks: int
) -> int:
    """Print the table and check the findings and the targets."""
    from tests.support.inspect_fixtures import BLOCK_COLLECTIVES

    baselines = {
        what.split(",")[0]: run for label, what, _, run, _ in results if label.startswith("json")
    }
    header = (
        f"{'measurement':<27} {'file':<21} {'MiB':>5} {'wall s':>7} {'CPU s':>7} "
        f"{'MB/s':>6} {'peak RSS':>8} {'speed ×':>7} {'RSS ×':>6}  target"
    )
    print()
    print(header)
    print("-" * (len(header) + 26))
    failures = []
    for label, what, size, run, target in results:
        cpu, peak, found = run["cpu"], run["peakRssMib"], run["found"]
        base = baselines.get(what.split(",")[0], baselines["kineto"])
        speed, rate = base["cpu"] / cpu, size / 1e6 / cpu
        met = {
            "quick": speed >= 10,
            "full": speed >= 1 and peak < 100,
            "chakra": rate >= 50,
        }.get(target)
        traced = "kineto" in what or "et," in what
        if traced and (found.get("rank"), found.get("worldSize")) != (RANK, WORLD):
            failures.append(f"{label} / {what}: rank {found.get('rank')}")
        et_found = (found.get("collectives"), found.get("status"))
        if (
            label == "inspect full"
            and "et," in what
            and et_found != ({"all_reduce": et_blocks}, "complete")
        ):
            failures.append(f"{label} / {what}: {found['collectives']} {found['reason']}")
        if label == "inspect full" and "kineto" in what:
            expected = {k: v * kineto_blocks for k, v in BLOCK_COLLECTIVES.items()}
            if found["collectives"] != expected or found["status"] != "complete":
                failures.append(f"{label} / {what}: {found['collectives']} {found['reason']}")
        if met is False:
            failures.append(f"{label} / {what}: target {TARGETS[target]} missed")
        verdict = "" if met is None else f"{TARGETS[target]}{' ok' if met else ' MISSED'}"
        same_file = traced  # ratios only where json.load read the same kind of file
        ratios = (
            f"{speed:>7.1f} {peak / base['peakRssMib']:>6.3f}"
            if same_file
            else f"{'-':>7} {'-':>6}"
        )
        print(
            f"{label:<27} {what:<21} {size / MIB:>5.0f} {run['seconds']:>7.2f} {cpu:>7.2f} "
            f"{rate:>6.1f} {peak:>8.1f} {ratios}  {verdict}"
        )
    print(
        "\nMB/s = 10^6 bytes per CPU second of the child; speed × = json.load CPU time / this CPU"
        "\ntime; RSS × = this peak RSS / json.load's (MiB, whole child process). CPU time, not wall"
        "\ntime, decides the targets: on a shared machine wall time measures the neighbours."
    )
    print()
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
