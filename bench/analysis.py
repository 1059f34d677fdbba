"""Benchmark: ``tracestore analyze`` of a Kineto file against ``json.load`` and HTA, in one run.

Builds a Kineto trace of ``--size-mib`` MiB in PyTorch's own layout from a real sample
(``tests/data/kineto-dlrm-8ranks``, rank 0: its events repeated, each copy's times,
correlations, flow ids and step numbers shifted so that it follows the one before), then
times, alternating over ``--rounds`` rounds, each in a fresh interpreter:

- ``tracestore analyze --json FILE`` (the installed command's ``tracestore.cli.run``),
- ``python -c 'json.load(...)'`` of the same file: the floor of anything that parses it whole,
- HTA 0.5.0 end to end: ``TraceAnalysis`` plus the temporal, overlap, kernel and idle
  breakdowns (``--hta-rounds`` of the rounds; one takes minutes),

with each process's peak RSS (its ``VmHWM``, written at exit). ``--big-gib`` adds a file of
that size analysed by ``tracestore analyze`` alone, for the memory bound::

    .venv/bin/python bench/analysis.py --size-mib 16 --rounds 1 --no-targets   # quick
    .venv/bin/python bench/analysis.py --big-gib 2                             # as reported
    .venv/bin/python bench/analysis.py --compare --ranks 64                    # issue 45

``--compare`` measures the comparison of two tracesets through the service instead
(``bench/comparison.py``): under a second for two 64-rank sets, beside the time the
service takes to analyse one and HTA TraceDiff's on the same files.

Targets (issue 44): ≥ 3× json.load's speed, ≥ 10× HTA's, peak RSS ≤ 256 MiB and ≤ 0.05×
HTA's, the big file within the same bound. Exits 1 when one is missed (unless --no-targets).

``--stragglers RANKS`` measures instead what straggler detection (issue 45) adds to a set's
analysis: a synthetic set of RANKS ranks whose one rank straggles, collective-heavy (every
other kernel an all-reduce, ``--collectives`` per rank), analysed over ``--rounds`` rounds

- by ``tracestore analyze``'s code in-process: every file analysed and the summary, with and
  without the straggler pass (the same ranks, each measured in every round);
- by the service (in-process, SQLite, its worker drained): upload to analysis complete,
  alternately with the pass and with it switched off, and the pass's own time inside.

Target: the pass adds no more than 10 % (medians, as ratios)::

    .venv/bin/python bench/analysis.py --stragglers 64 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLE = (
    REPO / "tests" / "data" / "kineto-dlrm-8ranks" / "worker0_step_12.1694128201545.pt.trace.json"
)
MIB = 1024 * 1024
RSS_BOUND_MIB = 256

# The numbers each copy shifts: times by the sample's span, ids by their range, step numbers
# by one. Kineto writes ids as "correlation", "External id" and a flow event's "id".
_NUMBERS = re.compile(rb'"(ts|correlation|External id|id)": (\d+)|ProfilerStep#(\d+)')

# Written into every child: its peak RSS (VmHWM, kB) to $BENCH_PEAK at exit. ru_maxrss is
# no use here: Linux carries it over fork and exec, so a child's can be its parent's.
_PEAK_HOOK = (
    "import atexit, os\n"
    "def _peak():\n"
    "    with open('/proc/self/status') as status:\n"
    "        kb = next(l.split()[1] for l in status if l.startswith('VmHWM:'))\n"
    "    with open(os.environ['BENCH_PEAK'], 'w') as out:\n"
    "        out.write(kb)\n"
    "atexit.register(_peak)\n"
)
_OURS = (
    "import sys\n"
    "from tracestore.cli import run\n"
    "sys.argv = ['tracestore', 'analyze', '--json', {path!r}]\n"
    "run()\n"
)
_JSON_LOAD = "import json\nwith open({path!r}, 'rb') as f:\n    json.load(f)\n"
_HTA = (
    "import logging\n"
    "logging.disable(logging.CRITICAL)\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "a = TraceAnalysis(trace_dir={directory!r}, include_last_profiler_step=True)\n"
    "a.get_temporal_breakdown(visualize=False)\n"
    "a.get_comm_comp_overlap(visualize=False)\n"
    "a.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True, num_kernels=10**6)\n"
    "a.get_idle_time_breakdown(ranks=[0], visualize=False)\n"
)


def write_trace(path: Path, size: int, sample: Path = SAMPLE) -> int:
    """A Kineto trace of about ``size`` bytes made of shifted copies of ``sample``'s events;
    the number of copies."""
    text = sample.read_bytes()
    start = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    end = text.rindex(b"]")
    head, body, tail = text[:start], text[start:end].rstrip().rstrip(b","), text[end:]
    pieces, kinds, bases = [], [], []
    last = 0
    for match in _NUMBERS.finditer(body):
        group = 3 if match[3] is not None else 2
        pieces.append(body[last : match.start(group)].replace(b"%", b"%%"))
        kinds.append(2 if group == 3 else 0 if match[1] == b"ts" else 1)
        bases.append(int(match[group]))
        last = match.end(group)
    pieces.append(body[last:].replace(b"%", b"%%"))
    template = b"%d".join(pieces)
    times = [b for b, k in zip(bases, kinds, strict=True) if k == 0]
    ids = [b for b, k in zip(bases, kinds, strict=True) if k == 1]
    time_span = max(times) - min(times) + 1_000
    id_span = max(ids) + 1
    copies = 0
    with path.open("wb") as out:
        out.write(head + b"\n")
        written = 0
        while written < size - len(head) - len(tail):
            shifts = (copies * time_span, copies * id_span, copies)
            piece = template % tuple(b + shifts[k] for b, k in zip(bases, kinds, strict=True))
            out.write(b",\n" + piece if copies else piece)
            written += len(piece) + 2
            copies += 1
        out.write(b"\n  " + tail)
    return copies


def measure(code: str) -> dict[str, float]:
    """Run ``code`` in a fresh interpreter: wall and CPU seconds, peak RSS in MiB."""
    with tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
        env = {**os.environ, "BENCH_PEAK": peak.name, "PYTHONPATH": str(REPO)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _PEAK_HOOK + code],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"measurement failed:\n{code}\n{done.stderr[-3000:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return {"seconds": seconds, "cpu": cpu, "peakMib": int(peak.read() or 0) / 1024}


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages (what else was running)."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def run(args: argparse.Namespace, root: Path) -> int:
    """Build the files, measure, report; the exit status."""
    trace_dir = root / "hta"
    trace_dir.mkdir()
    path = trace_dir / "rank0.pt.trace.json"
    print(f"writing a {args.size_mib} MiB Kineto trace into {root} ...", flush=True)
    copies = write_trace(path, args.size_mib * MIB)
    size = path.stat().st_size
    print(f"  {size / MIB:.1f} MiB, {copies} copies of the sample (one step each)")
    contenders = {
        "tracestore analyze": _OURS.format(path=str(path)),
        "json.load": _JSON_LOAD.format(path=str(path)),
        "HTA": _HTA.format(directory=str(trace_dir)),
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    print(f"load average before: {load_average()}", flush=True)
    order = list(contenders)
    for round_number in range(args.rounds):
        for name in order:
            if name == "HTA" and round_number >= args.hta_rounds:
                continue
            result = measure(contenders[name])
            runs[name].append(result)
            print(
                f"  round {round_number + 1} {name:<18} {result['seconds']:8.2f} s "
                f"{result['cpu']:8.2f} CPU s {result['peakMib']:8.1f} MiB",
                flush=True,
            )
        order = order[1:] + order[:1]  # each goes first in turn
    big: dict[str, float] | None = None
    if args.big_gib:
        path.unlink()
        big_path = root / "big.pt.trace.json"
        print(f"writing a {args.big_gib} GiB Kineto trace ...", flush=True)
        write_trace(big_path, int(args.big_gib * 1024 * MIB))
        big = measure(_OURS.format(path=str(big_path)))
        big["mib"] = big_path.stat().st_size / MIB
        print(f"  {big['mib']:.0f} MiB: {big['seconds']:.2f} s, {big['peakMib']:.1f} MiB peak")
    print(f"load average after: {load_average()}")
    return report(runs, size, big, check=not args.no_targets)


def report(
    runs: dict[str, list[dict[str, float]]],
    size: int,
    big: dict[str, float] | None,
    *,
    check: bool,
) -> int:
    """The table of medians and the targets."""
    medians = {
        name: {key: statistics.median(r[key] for r in results) for key in ("seconds", "cpu")}
        | {"peakMib": max(r["peakMib"] for r in results)}
        for name, results in runs.items()
        if results
    }
    ours = medians["tracestore analyze"]
    print()
    print(f"{'':<20} {'wall s':>8} {'CPU s':>8} {'MB/s':>7} {'peak MiB':>9} {'rounds':>6}")
    for name, m in medians.items():
        print(
            f"{name:<20} {m['seconds']:8.2f} {m['cpu']:8.2f} {size / 1e6 / m['seconds']:7.1f} "
            f"{m['peakMib']:9.1f} {len(runs[name]):6d}"
        )
    targets: list[tuple[str, float, bool]] = []
    json_load = medians["json.load"]
    targets.append(("speed vs json.load ≥ 3×", json_load["seconds"] / ours["seconds"], True))
    if "HTA" in medians:
        hta = medians["HTA"]
        targets.append(("speed vs HTA ≥ 10×", hta["seconds"] / ours["seconds"], True))
        targets.append(("peak RSS ≤ 0.05× HTA's", ours["peakMib"] / hta["peakMib"], False))
    targets.append((f"peak RSS ≤ {RSS_BOUND_MIB} MiB", ours["peakMib"], False))
    if big is not None:
        targets.append(
            (f"{big['mib']:.0f} MiB file: peak RSS ≤ {RSS_BOUND_MIB} MiB", big["peakMib"], False)
        )
    limits = {
        "speed vs json.load ≥ 3×": 3.0,
        "speed vs HTA ≥ 10×": 10.0,
        "peak RSS ≤ 0.05× HTA's": 0.05,
    }
    missed = 0
    print()
    for label, value, higher_is_better in targets:
        limit = limits.get(label, RSS_BOUND_MIB)
        met = value >= limit if higher_is_better else value <= limit
        missed += not met
        print(f"{'met   ' if met else 'MISSED'} {label}: {value:.3f}")
    return 1 if check and missed else 0


def _straggler_set(root: Path, ranks: int, collectives: int) -> list[Path]:
    """A synthetic set whose rank ``ranks // 3`` computes 20 % longer
    (tests/support/kineto_traces)."""
    sys.path.insert(0, str(REPO))
    from tests.support.kineto_traces import straggler_run

    steps = max(1, collectives // 25)
    run = straggler_run(ranks, steps, slow={ranks // 3: 1.2}, jitter=0.03, collectives_per_step=25)
    return [b.write(root / f"rank{b.rank:04d}.pt.trace.json") for b in run]


def _in_process(paths: list[Path]) -> tuple[float, float, list[int]]:
    """Every file analysed and the summary without stragglers; the straggler pass; named."""
    from tracestore.analysis import analyze_path
    from tracestore.analysis.summary import figures_summary, ranks_verdict

    started = time.perf_counter()
    ranks = []
    for path in paths:
        outcome = analyze_path(path, path.name)
        assert outcome.rank is not None, outcome.reason
        ranks.append(outcome.rank)
    figures_summary([r.figures() for r in ranks])
    analysed = time.perf_counter() - started
    started = time.perf_counter()
    found = ranks_verdict(ranks)
    return analysed, time.perf_counter() - started, [s["rank"] for s in found.stragglers]


def _through_service(root: Path, paths: list[Path], rounds: int) -> dict[str, list[float]]:
    """Upload to analysis complete, with the pass and without, alternating; the pass's time."""
    from fastapi.testclient import TestClient

    from tests.support.uploading import upload
    from tracestore.analysis.stragglers import Verdict, verdict
    from tracestore.server import stragglers
    from tracestore.server.app import create_app
    from tracestore.server.auth import ADMIN_TOKEN_FILE, bootstrap
    from tracestore.server.services import Services, build_services
    from tracestore.server.settings import Settings

    settings = Settings(data_dir=root / "data", in_process_worker=False)
    services = build_services(settings)
    bootstrap(services.db, settings.data_dir, services.now())
    token = (settings.data_dir / ADMIN_TOKEN_FILE).read_text().strip()
    files = {p.name: (p.read_bytes(), "primary") for p in paths}
    real = stragglers.straggler_verdict
    spent: list[float] = []

    def timed(services: Services, traceset_id: str) -> Verdict:
        started = time.perf_counter()
        try:
            return real(services, traceset_id)
        finally:
            spent.append(time.perf_counter() - started)

    def off(services: Services, traceset_id: str) -> Verdict:
        return verdict([])

    times: dict[str, list[float]] = {"with": [], "without": [], "pass": []}
    with TestClient(create_app(services=services)) as http:
        http.headers["Authorization"] = f"Bearer {token}"
        order = ["with", "without"]
        for round_number in range(rounds):
            for mode in order:
                stragglers.straggler_verdict = timed if mode == "with" else off
                traceset = upload(http, files, {"shape": {"rankCount": len(paths)}})
                started = time.perf_counter()
                services.wait_for_background()
                took = time.perf_counter() - started
                answer = http.get(f"/api/v1/tracesets/{traceset['id']}/analysis").json()
                assert answer["status"] == "complete", answer["reason"]
                named = [s["rank"] for s in answer["summary"]["stragglers"]]
                times[mode].append(took)
                if mode == "with":
                    times["pass"].append(spent[-1])
                print(
                    f"  round {round_number + 1} service, {mode:<7} {took:8.2f} s"
                    + (f" (the pass {spent[-1]:.3f} s; named {named})" if mode == "with" else ""),
                    flush=True,
                )
            order.reverse()
    stragglers.straggler_verdict = real
    services.close()
    return times


def stragglers(args: argparse.Namespace, root: Path) -> int:
    """What straggler detection adds to a set's analysis; the exit status."""
    paths = _straggler_set(root, args.stragglers, args.collectives)
    size = sum(p.stat().st_size for p in paths)
    print(
        f"{len(paths)} ranks, {size / MIB:.1f} MiB, {args.collectives} collectives and as many "
        f"computation kernels per rank; load average before: {load_average()}",
        flush=True,
    )
    analysed, passes = [], []
    for round_number in range(args.rounds):
        took, pass_took, named = _in_process(paths)
        analysed.append(took)
        passes.append(pass_took)
        print(
            f"  round {round_number + 1} in-process: analysis {took:8.2f} s, the pass "
            f"{pass_took:.3f} s, named {named}",
            flush=True,
        )
    service = _through_service(root, paths, args.rounds)
    print(f"load average after: {load_average()}")
    median = statistics.median
    without, with_pass = (
        median(analysed),
        median(a + p for a, p in zip(analysed, passes, strict=True)),
    )
    rows = [
        ("in-process (analyze's code)", without, with_pass),
        ("service, upload to complete", median(service["without"]), median(service["with"])),
    ]
    print()
    print(f"{'median of rounds':<30} {'without s':>10} {'with s':>10} {'with/without':>13}")
    for label, off, on in rows:
        print(f"{label:<30} {off:10.3f} {on:10.3f} {on / off:13.3f}")
    share = median(service["pass"]) / median(service["with"])
    print(
        f"{'service: the pass inside':<30} {median(service['pass']):10.3f} {'':>10} {share:13.3f}"
    )
    missed = 0
    print()
    for label, ratio in (
        ("in-process: with/without ≤ 1.10", with_pass / without),
        ("service: with/without ≤ 1.10", median(service["with"]) / median(service["without"])),
        ("service: the pass ≤ 0.10 of the analysis", share),
    ):
        met = ratio <= (0.10 if "pass" in label else 1.10)
        missed += not met
        print(f"{'met   ' if met else 'MISSED'} {label}: {ratio:.3f}")
    return 1 if missed and not args.no_targets else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=256, help="size of the trace")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three contenders")
    parser.add_argument("--hta-rounds", type=int, default=1, help="rounds that run HTA")
    parser.add_argument("--big-gib", type=float, default=0, help="also a file of this size")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the traces")
    parser.add_argument("--no-targets", action="store_true", help="report, never exit 1")
    parser.add_argument(
        "--stragglers", type=int, default=0, help="instead: the straggler pass on this many ranks"
    )
    parser.add_argument(
        "--collectives", type=int, default=1000, help="collectives per rank (--stragglers)"
    )
    parser.add_argument("--compare", action="store_true", help="the comparison of two sets")
    parser.add_argument("--ranks", type=int, default=64, help="with --compare: ranks a set")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tracestore-bench-", dir=args.dir) as tmp:
        if args.stragglers:
            return stragglers(args, Path(tmp))
        if args.compare:
            import comparison  # bench/comparison.py: it starts a service

            check = not args.no_targets
            return comparison.run(Path(tmp), args.ranks, args.rounds, args.hta_rounds, check)
        return run(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
