"""Request throughput and latency of one ``tracestore serve`` under load, against the ceiling of
its own server stack, in one run.

    .venv/bin/python bench/load.py                      # 10,000 tracesets, 10 s per case
    .venv/bin/python bench/load.py --duration 5 --count 2000   # quick
    .venv/bin/python bench/load.py --workers 2          # serve --workers 2 (scaling)
    .venv/bin/python bench/load.py --rounds 3           # each case 3 times, medians

The store: one real upload of 8 files (through the service), then its records copied in the
database to ``--count`` tracesets of varied workload families, all pointing at the same blobs,
as a team's store of many runs of the same shape would. The ceiling: a bare Starlette app on
uvicorn with httptools returning a constant JSON object, what no route on this stack can
beat, on asyncio's event loop as ``tracestore serve`` runs (the ratio); the same app on
uvloop (uvicorn's default when it is installed) is measured beside it, as a second ceiling
(``ratio_uvloop``). All are driven by ``wrk`` (Debian's package ``wrk``: ``apt-get install
wrk``; this script installs nothing) for each route at 64 and 200 connections, one route at
a time.

Prints per route and connection count: requests/s of ours and of the ceilings, the ratio
against the route's target, p50/p99 latency, wrk's errors (non-2xx answers, socket
connect/read/write errors, timeouts) and the server's CPU time per request (its processes'
user + system time over our run, divided by the requests answered: steadier than requests/s
on a shared machine). With ``--rounds N`` each case runs N times, ceiling then ours, and
the medians are printed (the ratio: the median of the rounds' own ratios; 1-2 s runs of
the same case moved the ceiling by half). ``--routes get,list`` runs only those. Targets
at 64 connections (issue 16): get >= 0.2 x the ceiling, list >= 0.1 x, upload-url >= 0.05
x, healthz >= 0.5 x; p99 <= 100 ms for get and list; at 200 connections no errors and no
timeouts.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ is sys.path[0]; the repository root is what this script imports from.
sys.path[0] = str(Path(__file__).resolve().parents[1])
sys.path.insert(1, str(Path(__file__).resolve().parent))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402
from served import Server, cpu_seconds, free_port  # noqa: E402
from sqlalchemy import insert, select  # noqa: E402

from tracestore.client import Client  # noqa: E402
from tracestore.server import db  # noqa: E402
from tracestore.server.db.database import Database  # noqa: E402
from tracestore.server.ids import new_id  # noqa: E402

FAMILIES = ["llama", "gpt", "mixtral", "deepseek", "qwen", "gemma", "falcon", "mpt"]
CONNECTIONS = (64, 200)
# Route -> (ratio target at 64 connections, p99 target in ms or None).
TARGETS: dict[str, tuple[float, float | None]] = {
    "get by id": (0.2, 100.0),
    "list first page": (0.1, 100.0),
    "list, workload filter": (0.1, 100.0),
    "upload-url, 8 files": (0.05, None),
    "healthz": (0.5, None),
}
# --routes names them so.
ROUTE_KEYS = {
    "get": "get by id",
    "list": "list first page",
    "filter": "list, workload filter",
    "healthz": "healthz",
    "upload": "upload-url, 8 files",
}
UPLOAD_BODY = {
    "name": "load test",
    "files": [{"name": f"rank_{i}.json", "size": 1024, "role": "primary"} for i in range(8)],
    "workloadMetadata": {"shape": {"rankCount": 8}, "workload_family": "llama"},
}
CEILING_APP = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def constant(request):
    return JSONResponse({"status": "ok", "id": "ts_constant", "fileCount": 8})

app = Starlette(routes=[Route("/{path:path}", constant, methods=["GET", "POST"])])
"""


@dataclass
class Measured:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int
    timeouts: int
    requests: int


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def wrk(url: str, connections: int, duration: int, token: str, script: Path | None) -> Measured:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "--timeout", "5s"]
    command += ["-H", f"Authorization: Bearer {token}"]
    if script is not None:
        command += ["-s", str(script)]
    out = subprocess.run([*command, url], check=True, capture_output=True, text=True).stdout
    latency = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M))
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    done = re.search(r"^\s*(\d+) requests in", out, re.M)
    if rate is None or done is None or not latency:
        raise SystemExit(f"could not read wrk's output:\n{out}")
    connect, read, write, timeouts = (int(g) for g in errors.groups()) if errors else (0,) * 4
    return Measured(
        requests_per_s=float(rate.group(1)),
        p50_ms=_ms(latency["50"]),
        p99_ms=_ms(latency["99"]),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=connect + read + write,
        timeouts=timeouts,
        requests=int(done.group(1)),
    )


def _median(runs: list[Measured]) -> Measured:
    """Rounds of one case as one: the median rate and latencies, the errors and requests
    summed."""
    return Measured(
        requests_per_s=statistics.median(run.requests_per_s for run in runs),
        p50_ms=statistics.median(run.p50_ms for run in runs),
        p99_ms=statistics.median(run.p99_ms for run in runs),
        non_2xx=sum(run.non_2xx for run in runs),
        socket_errors=sum(run.socket_errors for run in runs),
        timeouts=sum(run.timeouts for run in runs),
        requests=sum(run.requests for run in runs),
    )


def seed(data_dir: Path, count: int) -> tuple[str, str]:
    """Upload one real 8-file traceset, then copy its records to ``count`` tracesets; the
    template's id and the admin token."""
    server = Server(data_dir)
    try:
        source = data_dir.parent / "src"
        source.mkdir()
        for rank in range(8):
            (source / f"rank_{rank}.json").write_text(
                json.dumps({"distributedInfo": {"rank": rank, "world_size": 8}, "traceEvents": []})
            )
        with Client(server.url, server.token) as client:
            template = client.upload_traceset(
                source,
                name="template",
                workload_metadata={"shape": {"rankCount": 8}, "workload_family": "llama"},
            ).id
        token = server.token
    finally:
        server.stop()
    database = Database(f"sqlite:///{data_dir / 'tracestore.db'}")
    try:
        with database.session() as session:
            traceset = session.execute(
                select(db.Traceset.__table__).where(db.Traceset.id == template)
            ).one()
            files = session.execute(
                select(db.TracesetFile.__table__).where(db.TracesetFile.traceset_id == template)
            ).all()
            tracesets, members = [], []
            for n in range(count - 1):
                family = FAMILIES[n % len(FAMILIES)]
                copy_id = new_id("ts")
                metadata = {"shape": {"rankCount": 8}, "workload_family": family}
                tracesets.append(
                    dict(
                        traceset._mapping,
                        id=copy_id,
                        name=f"{family} run {n}",
                        metadata_text=json.dumps(metadata),
                        workload_metadata=metadata,
                    )
                )
                members += [dict(f._mapping, traceset_id=copy_id) for f in files]
            for start in range(0, len(tracesets), 1000):
                session.execute(insert(db.Traceset), tracesets[start : start + 1000])
            for start in range(0, len(members), 8000):
                session.execute(insert(db.TracesetFile), members[start : start + 8000])
    finally:
        database.dispose()
    return template, token


def ceiling(port: int, workdir: Path, loop: str) -> subprocess.Popen[bytes]:
    (workdir / "ceiling_app.py").write_text(CEILING_APP)
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "ceiling_app:app", "--port", str(port)),
            *("--http", "httptools", "--log-level", "warning", "--no-access-log"),
            *("--loop", loop),
        ],
        cwd=workdir,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.terminate()
    raise SystemExit("the ceiling app did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="tracesets in the store")
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--workers", type=int, default=1, help="tracestore serve --workers")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="runs of each case (ceiling, then ours); the medians are reported",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument(
        "--routes",
        default=",".join(ROUTE_KEYS),
        help=f"comma list of the routes to run, of {', '.join(ROUTE_KEYS)} (default: all)",
    )
    args = parser.parse_args()
    chosen = [name.strip() for name in args.routes.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(ROUTE_KEYS))
    if unknown:
        parser.error(f"unknown routes {', '.join(unknown)}; choose from {', '.join(ROUTE_KEYS)}")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")

    root = Path(tempfile.mkdtemp(prefix="tracestore-loadbench-", dir=args.workdir))
    template, token = seed(root / "data", args.count)
    post = root / "post.lua"
    post.write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = {json.dumps(json.dumps(UPLOAD_BODY))}\n"
    )
    routes: dict[str, tuple[str, Path | None]] = {
        "get by id": (f"/api/v1/tracesets/{template}", None),
        "list first page": ("/api/v1/tracesets?limit=20", None),
        "list, workload filter": ("/api/v1/tracesets?limit=20&workload_family=gpt", None),
        "healthz": ("/healthz", None),
        # Last: it adds tracesets (status uploading) to the store.
        "upload-url, 8 files": ("/api/v1/tracesets/upload-url", post),
    }
    routes = {route: routes[route] for key, route in ROUTE_KEYS.items() if key in chosen}
    server = Server(
        root / "data",
        env={"TRACESTORE_SWEEP_INTERVAL": "PT1H"},
        args=["--workers", str(args.workers)] if args.workers > 1 else [],
    )
    port, uvloop_port = free_port(), free_port()
    bare = ceiling(port, root, "asyncio")  # the loop tracestore serve runs
    bare_uvloop = ceiling(uvloop_port, root, "uvloop")
    results: list[dict[str, Any]] = []
    # The machine is shared: say how busy it was, beside the ratios.
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr, flush=True)
    try:
        for route, (path, script) in routes.items():
            answer = httpx.request(
                "POST" if script else "GET",
                server.url + path,
                headers={"Authorization": f"Bearer {token}"},
                json=UPLOAD_BODY if script else None,
            )
            answer.raise_for_status()
            for connections in CONNECTIONS:
                rounds = []
                for _ in range(args.rounds):
                    ceiling_run = wrk(
                        f"http://127.0.0.1:{port}{path}", connections, args.duration, token, script
                    )
                    uvloop_run = wrk(
                        f"http://127.0.0.1:{uvloop_port}{path}",
                        connections,
                        args.duration,
                        token,
                        script,
                    )
                    cpu_before = cpu_seconds(server.process.pid)
                    ours = wrk(server.url + path, connections, args.duration, token, script)
                    cpu = cpu_seconds(server.process.pid) - cpu_before
                    rounds.append((ceiling_run, uvloop_run, ours, cpu))
                ceiling_run = _median([r[0] for r in rounds])
                uvloop_run = _median([r[1] for r in rounds])
                ours = _median([r[2] for r in rounds])
                cpu_ms = 1000 * sum(r[3] for r in rounds) / ours.requests
                # The median of each round's ratio: a round's ceiling and ours ran minutes
                # apart at most, so what else the machine did weighs on both.
                ratio = statistics.median(r[2].requests_per_s / r[0].requests_per_s for r in rounds)
                ratio_uvloop = statistics.median(
                    r[2].requests_per_s / r[1].requests_per_s for r in rounds
                )
                ratio_target, p99_target = TARGETS[route]
                results.append(
                    {
                        "route": route,
                        "connections": connections,
                        "workers": args.workers,
                        "ours": asdict(ours),
                        "ceiling": asdict(ceiling_run),
                        "ceiling_uvloop": asdict(uvloop_run),
                        "ratio": round(ratio, 4),
                        "round_ratios": [
                            round(r[2].requests_per_s / r[0].requests_per_s, 4) for r in rounds
                        ],
                        "ratio_uvloop": round(ratio_uvloop, 4),
                        "server_cpu_ms_per_request": round(cpu_ms, 4),
                        "ratio_target": ratio_target if connections == 64 else None,
                        "p99_target_ms": p99_target if connections == 64 else None,
                        "errors_ok": connections != 200
                        or (ours.non_2xx + ours.socket_errors + ours.timeouts == 0),
                    }
                )
                print(
                    f"{route:24} c={connections:<3} ours {ours.requests_per_s:8.0f} req/s "
                    f"(p50 {ours.p50_ms:6.1f} ms, p99 {ours.p99_ms:7.1f} ms, "
                    f"errors {ours.non_2xx}/{ours.socket_errors}/{ours.timeouts}, "
                    f"server CPU {cpu_ms:.3f} ms/req) | ceiling "
                    f"{ceiling_run.requests_per_s:8.0f} req/s (uvloop "
                    f"{uvloop_run.requests_per_s:.0f}) | ratio {ratio:.3f} ({ratio_uvloop:.3f})"
                    + (f" (target {ratio_target})" if connections == 64 else "")
                    + (
                        " rounds "
                        + "/".join(
                            f"{r[2].requests_per_s / r[0].requests_per_s:.3f}" for r in rounds
                        )
                        if len(rounds) > 1
                        else ""
                    ),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        print(f"load average at end: {os.getloadavg()}", file=sys.stderr, flush=True)
        for process in (bare, bare_uvloop):
            process.terminate()
            process.wait(timeout=30)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
