"""Upload throughput: ``Client.upload_traceset`` into a real ``tracestore serve`` versus
``cp`` + ``openssl dgst -sha256`` of the same files on the same disk, in one run.

    .venv/bin/python bench/upload.py                 # 16 × 128 MiB and 256 × 8 MiB, 3 runs each
    .venv/bin/python bench/upload.py --scale 0.125   # quick: file sizes scaled down
    .venv/bin/python bench/upload.py --cases cli-large,cli-many   # the command line's cases

Prints, per case, the median of the runs: our MB/s, the baseline's MB/s, their ratio
against the target (0.7 for the large files, 0.5 for the many small ones), where our time
went (part PUTs, during which both sides hash, and completion), the CPU seconds of client
and server, and the client's peak RSS against its budget (64 MiB + concurrency × part size).

The ``cli-*`` cases run ``tracestore upload`` as users do, a fresh process from a shell
(start, the local inspection of the files, the upload, the answer), on 8 × 64 MiB (target
0.7) and 1,000 × 1 MiB (target 0.4); their phases are not split.

    .venv/bin/python bench/upload.py --cases cli-large --repeat 7 --against HEAD~1

``--against REV`` also measures, in the same rounds, what a change is worth: the command
line's cases as ``python -m tracestore.cli upload`` of this tree and of REV's (``git
archive``, compiled once, on ``PYTHONPATH``), in alternating order, against the same
server. It prints both medians and REV's time over this tree's. With ``--serve-against``,
REV's command line uploads to a ``tracestore serve`` of REV's tree instead (started beside
this tree's, same settings), so the ratio is what a change to the server is worth as well.

    .venv/bin/python bench/upload.py --cases cli-many --repeat 7 --against HEAD~1 --serve-against
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guest import memory_note
from served import Server, cpu_seconds

MIB = 1024 * 1024
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    name: str
    files: int
    size: int
    target: float
    cli: bool = False


def write_files(directory: Path, case: Case) -> None:
    directory.mkdir(parents=True)
    block = 8 * MIB
    for index in range(case.files):
        with open(directory / f"rank_{index:04d}.bin", "wb") as out:
            left = case.size
            while left:
                chunk = os.urandom(min(block, left))
                out.write(chunk)
                left -= len(chunk)


CHILD = """
import json, sys, time
from tracestore.client import Client
url, token, source, concurrency = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
marks = {}
def progress(event):
    now = time.perf_counter()
    marks.setdefault(event.phase + "_start", now)
    marks[event.phase + "_end"] = now
with Client(url, token) as client:
    start = time.perf_counter()
    ts = client.upload_traceset(source, workload_metadata={"shape": {"rankCount": 1}},
                                concurrency=concurrency, progress=progress)
    end = time.perf_counter()
assert ts.status == "ready", ts.status
print(json.dumps({"seconds": end - start, "start": start, "end": end, **marks}))
"""


def settle(*servers: Server) -> None:
    """Write back dirty pages left by the previous run, and wait for ``servers`` to finish
    the work an upload leaves them (the staged bytes' removal, the inspection job), so that
    no run pays for another's: on this VM 2 GiB of dirty pages made the next run up to 2 ×
    slower, and a server's ~0.2 CPU-s after an upload of 1,000 files ran into the next run,
    ours or the baseline's."""
    os.sync()
    time.sleep(0.5)
    deadline = time.monotonic() + 30
    for server in servers:
        spent = cpu_seconds(server.process.pid)
        while time.monotonic() < deadline:
            time.sleep(0.25)
            spent, before = cpu_seconds(server.process.pid), spent
            if spent - before < 0.02:  # idle: its timers only
                break


def run_ours(
    server: Server, source: Path, concurrency: int, quiet: Sequence[Server] = ()
) -> dict[str, float]:
    """``Client.upload_traceset`` in a fresh process, once ``quiet``'s servers are idle."""
    settle(*quiet)
    before = cpu_seconds(server.process.pid)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, server.url, server.token, str(source), str(concurrency)],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"the upload failed (status {status})")
    marks = json.loads(output)
    put_end = marks.get("upload_end", marks["end"])
    return {
        "seconds": marks["seconds"],
        "put": put_end - marks.get("upload_start", put_end),
        "complete": marks["end"] - put_end,
        "client_cpu": usage.ru_utime + usage.ru_stime,
        "server_cpu": cpu_seconds(server.process.pid) - before,
        "rss": usage.ru_maxrss * 1024,
    }


def run_cli(
    server: Server,
    source: Path,
    concurrency: int,
    quiet: Sequence[Server] = (),
    tree: Path | None = None,
) -> dict[str, float]:
    """``tracestore upload`` as a fresh process, as from a shell, once ``quiet``'s servers
    are idle; with ``tree``, that tree's command line as ``python -m tracestore.cli``."""
    metadata = source.parent / f"{source.name}-metadata.json"
    metadata.write_text(json.dumps({"shape": {"rankCount": 1}}))
    command, env = [str(Path(sys.executable).with_name("tracestore"))], dict(os.environ)
    if tree is not None:
        python, env = tree_python(tree)
        command = [*python, "-m", "tracestore.cli"]
    settle(*quiet)
    before = cpu_seconds(server.process.pid)
    start = time.perf_counter()
    child = subprocess.Popen(
        [
            *(*command, "upload", str(source), "--workload-metadata", str(metadata)),
            *("--url", server.url, "--token", server.token, "--concurrency", str(concurrency)),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0 or json.loads(output)["status"] != "ready":
        raise SystemExit(f"tracestore upload failed (status {status})")
    return {
        "seconds": seconds,
        "client_cpu": usage.ru_utime + usage.ru_stime,
        "server_cpu": cpu_seconds(server.process.pid) - before,
        "rss": usage.ru_maxrss * 1024,
    }


def run_baseline(source: Path, target: Path, quiet: Sequence[Server] = ()) -> float:
    files = sorted(str(p) for p in source.iterdir())
    settle(*quiet)
    start = time.perf_counter()
    target.mkdir()
    subprocess.run(["cp", *files, str(target)], check=True)
    copies = sorted(str(p) for p in target.iterdir())
    subprocess.run(["openssl", "dgst", "-sha256", *copies], check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    shutil.rmtree(target)
    return seconds


def tree_python(tree: Path) -> tuple[list[str], dict[str, str]]:
    """This interpreter and the environment in which it imports ``tracestore`` from
    ``tree`` (on ``PYTHONPATH``; ``-P`` keeps ``-m`` from putting the working directory,
    maybe this checkout, first)."""
    return [sys.executable, "-P"], {**os.environ, "PYTHONPATH": str(tree)}


def check_tree(tree: Path) -> None:
    """Fail unless ``python -m tracestore.cli`` as run_cli runs it imports from ``tree``."""
    python, env = tree_python(tree)
    where = subprocess.run(
        [*python, "-c", "import tracestore.cli; print(tracestore.cli.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(where).is_relative_to(tree):
        raise SystemExit(f"tracestore imports from {where}, not from {tree}")


def export_tree(rev: str, target: Path) -> Path:
    """The package tree of commit ``rev``, compiled (this machine may not write bytecode
    at import, which would make every start compile it from source)."""
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "tracestore"], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(target)], check=True)
    check_tree(target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply file sizes by this")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--part-size-mib", type=int, default=64)
    parser.add_argument("--cases", default="large,many", help="large, many or both")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    parser.add_argument(
        "--against", metavar="REV", help="also time the command line's cases at commit REV"
    )
    parser.add_argument(
        "--serve-against",
        action="store_true",
        help="with --against, REV's command line uploads to a server of REV's tree",
    )
    args = parser.parse_args()
    if args.serve_against and not args.against:
        parser.error("--serve-against compares with --against REV's server; give --against")

    cases = {
        "large": Case("16 × 128 MiB", 16, int(128 * MIB * args.scale), 0.7),
        "many": Case("256 × 8 MiB", 256, int(8 * MIB * args.scale), 0.5),
        "cli-large": Case(
            "tracestore upload, 8 × 64 MiB", 8, int(64 * MIB * args.scale), 0.7, True
        ),
        "cli-many": Case(
            "tracestore upload, 1,000 × 1 MiB", 1000, int(MIB * args.scale), 0.4, True
        ),
    }
    part_size = args.part_size_mib * MIB
    root = Path(tempfile.mkdtemp(prefix="tracestore-bench-", dir=args.workdir))
    serve_env = {"TRACESTORE_PART_SIZE": str(part_size)}
    serve_args = ("--workers", str(args.workers))
    server = Server(root / "data", env=serve_env, args=serve_args)
    other_server = server
    results: list[dict[str, Any]] = []
    try:
        other = export_tree(args.against, root / "against") if args.against else None
        if other is not None:
            check_tree(REPO)
        if other is not None and args.serve_against:
            python, env = tree_python(other)
            other_server = Server(
                root / "data-against", env={**env, **serve_env}, args=serve_args, python=python
            )
        servers = [server] if other_server is server else [server, other_server]
        for key in args.cases.split(","):
            case = cases[key]
            source = root / f"src-{key}"
            write_files(source, case)
            total = case.files * case.size
            ours, base = [], []
            trees: dict[str, list[float]] = {"this": [], "that": []}
            for run in range(args.repeat):
                run_one = run_cli if case.cli else run_ours
                ours.append(run_one(server, source, args.concurrency, servers))
                if case.cli and other is not None:
                    sides = [("this", REPO), ("that", other)]
                    for side, tree in sides if run % 2 == 0 else sides[::-1]:
                        serving = server if side == "this" else other_server
                        timed = run_cli(serving, source, args.concurrency, servers, tree)
                        trees[side].append(timed["seconds"])
                base.append(run_baseline(source, root / f"copy-{key}-{run}", servers))
            median = {k: statistics.median(r[k] for r in ours) for k in ours[0]}
            ours_mbs = total / median["seconds"] / 1e6
            base_mbs = total / statistics.median(base) / 1e6
            budget = 64 * MIB + args.concurrency * part_size
            results.append(
                {
                    "case": case.name if args.scale == 1 else f"{case.name} × {args.scale}",
                    "bytes": total,
                    "ours_MBps": round(ours_mbs, 1),
                    "baseline_MBps": round(base_mbs, 1),
                    "ratio": round(ours_mbs / base_mbs, 3),
                    "target": case.target,
                    "phases_s": {
                        k: round(median[k], 2) for k in ("put", "complete") if k in median
                    },
                    "cpu_s": {
                        "client": round(median["client_cpu"], 2),
                        "server": round(median["server_cpu"], 2),
                    },
                    "client_peak_rss_MiB": round(max(r["rss"] for r in ours) / MIB, 1),
                    "rss_budget_MiB": budget // MIB,
                    "runs_s": [round(r["seconds"], 2) for r in ours],
                    "baseline_runs_s": [round(b, 2) for b in base],
                }
            )
            if trees["this"]:
                this, that = (statistics.median(trees[side]) for side in ("this", "that"))
                results[-1]["against"] = {
                    "rev": args.against,
                    "served_by_rev": args.serve_against,
                    "this_s": round(this, 3),
                    "that_s": round(that, 3),
                    "that_over_this": round(that / this, 3),
                    "this_runs_s": [round(t, 3) for t in trees["this"]],
                    "that_runs_s": [round(t, 3) for t in trees["that"]],
                }
            shutil.rmtree(source)
    finally:
        server.stop()
        if other_server is not server:
            other_server.stop()
        shutil.rmtree(root, ignore_errors=True)

    print(
        f"bench/upload.py  scale={args.scale}  repeat={args.repeat}  "
        f"concurrency={args.concurrency}  part={args.part_size_mib} MiB"
    )
    if note := memory_note():
        print(note)
    for r in results:
        verdict = "meets" if r["ratio"] >= r["target"] else "BELOW"
        rss_ok = "within" if r["client_peak_rss_MiB"] <= r["rss_budget_MiB"] else "OVER"
        print(
            f"{r['case']:<22} ours {r['ours_MBps']:7.1f} MB/s   cp+openssl "
            f"{r['baseline_MBps']:7.1f} MB/s   ratio {r['ratio']:.2f} ({verdict} target "
            f"{r['target']})   client RSS {r['client_peak_rss_MiB']} MiB ({rss_ok} "
            f"{r['rss_budget_MiB']} MiB)"
        )
        print(
            f"{'':<22} phases {r['phases_s']}  cpu {r['cpu_s']}  runs {r['runs_s']}  "
            f"baseline runs {r['baseline_runs_s']}"
        )
        if against := r.get("against"):
            served = " (each to its tree's server)" if against["served_by_rev"] else ""
            print(
                f"{'':<22} python -m tracestore.cli{served}: this tree {against['this_s']:.3f} s, "
                f"{against['rev']} {against['that_s']:.3f} s: {against['rev']} takes "
                f"{against['that_over_this']:.3f} × this tree's time"
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
