"""CPU time per request of the app alone (middleware, FastAPI, dependencies, use case),
driven over ASGI in-process with no socket and no uvicorn, against a bare Starlette route
driven the same way, in one run.

    .venv/bin/python bench/request_cpu.py                  # 2,000 tracesets, 30 chunks of 100
    .venv/bin/python bench/request_cpu.py --chunks 10      # quick
    .venv/bin/python bench/request_cpu.py --routes upload  # one route (get, list, filter, upload)

The store is ``bench/load.py``'s (one real upload of 8 files, copied to ``--count``
tracesets); upload-url POSTs ``bench/load.py``'s 8-file body, so each of its requests adds
a traceset (status uploading). Each route is timed in chunks of 100 requests with
``time.process_time``; the minimum and the 25th percentile of the chunks are printed: on a
shared machine the other work only ever adds, so the low chunks are the request's own cost.
This is what told the fourth request-path round's changes apart where wrk's requests/s moved
more than they did.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])
sys.path.insert(1, str(Path(__file__).resolve().parent))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Awaitable, Callable, MutableMapping  # noqa: E402
from typing import Any  # noqa: E402

from load import ROUTE_KEYS, UPLOAD_BODY, seed  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from tracestore.server.app import create_app  # noqa: E402
from tracestore.server.services import build_services  # noqa: E402
from tracestore.server.settings import Settings  # noqa: E402

CHUNK = 100
App = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]


async def _constant(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok", "id": "ts_constant", "fileCount": 8})


async def request(app: App, path: str, query: bytes, token: str, body: bytes = b"") -> None:
    """One request through ``app``: a GET, or a POST of the JSON ``body`` when it has one."""
    headers = [(b"host", b"127.0.0.1:8000"), (b"authorization", f"Bearer {token}".encode())]
    if body:
        headers += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST" if body else "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    statuses: list[int] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(scope, receive, send)
    if statuses != [200]:
        raise SystemExit(f"{path}?{query.decode()} answered {statuses}")


async def chunks(
    app: App, path: str, query: bytes, token: str, count: int, body: bytes = b""
) -> list[float]:
    """CPU milliseconds per request of ``count`` chunks of CHUNK requests, after a warm-up."""
    for _ in range(2 * CHUNK):
        await request(app, path, query, token, body)
    times = []
    for _ in range(count):
        started = time.process_time()
        for _ in range(CHUNK):
            await request(app, path, query, token, body)
        times.append(1000 * (time.process_time() - started) / CHUNK)
    return sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="tracesets in the store")
    parser.add_argument("--chunks", type=int, default=30, help=f"chunks of {CHUNK} per route")
    parser.add_argument(
        "--routes",
        default="get,list,filter,upload",
        help="comma list of the routes to time, of get, list, filter, upload (default: all)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    args = parser.parse_args()
    keys = {key.strip() for key in args.routes.split(",") if key.strip()}
    unknown = sorted(keys - {"get", "list", "filter", "upload"})
    if unknown:
        parser.error(f"unknown routes {', '.join(unknown)}; choose from get, list, filter, upload")
    chosen = {ROUTE_KEYS[key] for key in keys}

    root = Path(tempfile.mkdtemp(prefix="tracestore-requestcpu-", dir=args.workdir))
    try:
        template, token = seed(root / "data", args.count)
        services = build_services(Settings(data_dir=root / "data"))
        ours = create_app(services=services)
        bare = Starlette(routes=[Route("/{path:path}", _constant)])
        upload = json.dumps(UPLOAD_BODY).encode()
        routes = {
            "get by id": (f"/api/v1/tracesets/{template}", b"", b""),
            "list first page": ("/api/v1/tracesets", b"limit=20", b""),
            "list, workload filter": ("/api/v1/tracesets", b"limit=20&workload_family=gpt", b""),
            "upload-url, 8 files": ("/api/v1/tracesets/upload-url", b"", upload),
        }
        ceiling = asyncio.run(chunks(bare, "/x", b"", token, args.chunks))
        print(
            f"{'bare Starlette':24} min {ceiling[0]:.3f} ms  p25 {ceiling[len(ceiling) // 4]:.3f}"
        )
        for route, (path, query, body) in routes.items():
            if route not in chosen:
                continue
            times = asyncio.run(chunks(ours, path, query, token, args.chunks, body))
            print(
                f"{route:24} min {times[0]:.3f} ms  p25 {times[len(times) // 4]:.3f}  "
                f"({times[0] / ceiling[0]:.1f} x the bare route)",
                flush=True,
            )
        services.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
