"""Benchmark of GET /api/v1/tracesets' use case at a million tracesets, on PostgreSQL and SQLite.

Loads N tracesets with varied metadata (and, in the same run, a small baseline of 10,000),
then times the real use case (``pages.page_text``, what the route runs) for eleven
queries: the first page unfiltered, page 100 by cursor, a ``workload_family`` filter, a
``workload_family`` + ``shape.global_batch_size`` filter, a ``search`` substring, an inspected fact
(``inspected.gpu_model=H100``, from the ``traceset_facts`` rows each traceset carries), an
inspected world-size range (``minWorldSize``/``maxWorldSize``), and the analysis summary's:
``maxIdlePct=20``, ``minOverlapPct=50`` and ``sort=step_time:desc``; who uploaded and
the tags (issue 43): ``uploadedBy=me`` (2.2 % of the tenant's), ``tag=nightly`` (30 %) and
``tag=nightly&tag=baseline``; and the census's verdict (``census=fail``, one inspected
traceset in twenty). Prints p50/p99 per size, the
large/baseline ratio of each p50 (targets: p50 <= 20 ms at 1M on PostgreSQL, ratio <= 3)
and the EXPLAIN of each query at the large size. The store it loads is
``listbench/store.py``'s, the EXPLAIN capture ``listbench/plans.py``'s.

    .venv/bin/python bench/list.py --count 1000000          # the full run
    .venv/bin/python bench/list.py --count 100000 --engines sqlite
    .venv/bin/python bench/list.py --extra --only tag        # the tag filters, rare ones too
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ is sys.path[0]; the repository root is what this script imports from.
sys.path[0] = str(Path(__file__).resolve().parents[1])
sys.path.insert(1, str(Path(__file__).resolve().parent))

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from listbench.plans import explain  # noqa: E402
from listbench.store import MEMBER_OF, load  # noqa: E402

from tests.support.pgserver import PostgresServer  # noqa: E402
from tracestore.server.auth import Principal  # noqa: E402
from tracestore.server.db.database import Database  # noqa: E402
from tracestore.server.listing import pages, rare_tags  # noqa: E402
from tracestore.server.listing.query import parse_list_query  # noqa: E402
from tracestore.server.presigned import UrlSigner  # noqa: E402
from tracestore.server.services import Services  # noqa: E402
from tracestore.server.settings import Settings  # noqa: E402

BASELINE = 10_000
QUERIES: dict[str, dict[str, str] | list[tuple[str, str]]] = {
    "first page": {},
    "page 100 by cursor": {},
    "workload_family=gpt": {"workload_family": "gpt"},
    "family + global_batch_size": {"workload_family": "llama", "shape.global_batch_size": "1024"},
    "search substring": {"search": "Mixtral"},
    "inspected.gpu_model=H100": {"inspected.gpu_model": "H100"},
    "world size 64..256": {"minWorldSize": "64", "maxWorldSize": "256"},
    "maxIdlePct=20": {"maxIdlePct": "20"},
    "minOverlapPct=50": {"minOverlapPct": "50"},
    "sort=step_time:desc": {"sort": "step_time:desc"},
    "uploadedBy=me": {"uploadedBy": "me"},
    "tag=nightly": {"tag": "nightly"},
    "tag=nightly&tag=baseline": [("tag", "nightly"), ("tag", "baseline")],
    "census=fail": {"census": "fail"},
}
# With --extra: queries outside the targets, to show where the design's limits are.
EXTRA_QUERIES: dict[str, dict[str, str] | list[tuple[str, str]]] = {
    "sort=name:asc": {"sort": "name:asc"},
    "family, sort=name:asc": {"workload_family": "gpt", "sort": "name:asc"},
    "family, sort=size:desc": {"workload_family": "gpt", "sort": "size:desc"},
    "rare family, sort=name:asc": {"workload_family": "t5", "sort": "name:asc"},
    "search a rare term": {"search": "run0000"},
    "rare family (GIN/@>)": {"workload_family": "t5", "precision": "fp32", "parallelism.tp": "8"},
    "rare GPU (B200)": {"inspected.gpu_model": "B200"},
    "census=unknown, sort=name:asc": {"census": "unknown", "sort": "name:asc"},
    "idle <= 5, slowest first": {"maxIdlePct": "5", "sort": "step_time:desc"},
    "step_time:asc, page by cursor": {"sort": "step_time:asc", "minOverlapPct": "90"},
    "a rare uploader": {"uploadedBy": "user_tenant_a_49"},
    "uploadedBy=me, sort=name:asc": {"uploadedBy": "me", "sort": "name:asc"},
    # Driven from the tag's rows (rare_tags.RARE_TAG): its cost grows with the tag's tracesets
    # (2,000 here, 20 at 10,000), not with the table, and is bounded by RARE_TAG lookups.
    "a rare tag (regression, 0.2 %)": {"tag": "regression"},
    "a rare tag and a common one": [("tag", "nightly"), ("tag", "regression")],
    "a rare tag, slowest first": {"tag": "regression", "sort": "step_time:desc"},
    "a rare tag, walked (as before)": {"tag": "regression"},
    "GPU + backend + world size": {
        "inspected.gpu_model": "A100",
        "inspected.backend": "nccl",
        "inspected.world_size": "8",
    },
}


@dataclass
class Measured:
    p50: float
    p99: float
    explain: str


PRINCIPAL = Principal(
    user_id="user_bench",
    tenant_id="tenant_a",
    workspace_ids=frozenset(MEMBER_OF),
    default_workspace_id=MEMBER_OF[0],
)


def _page_100_cursor(services: Services) -> str:
    query = parse_list_query([])
    cursor: str | None = None
    for _ in range(99):
        page = json.loads(pages.page_text(services, PRINCIPAL, query))
        cursor = page["pagination"]["nextCursor"]
        assert isinstance(cursor, str), "fewer than 100 pages"
        query = parse_list_query([("next", cursor)])
    assert cursor is not None
    return cursor


def _runner(
    services: Services, items: list[tuple[str, str]], walked: bool = False
) -> Callable[[], int]:
    """One page's use case; ``walked``: as before rare_tags.RARE_TAG, no tag drives a page."""

    def run() -> int:
        query = parse_list_query(items)
        chooses = rare_tags.rarest
        if walked:  # no count of the tags either, as before
            rare_tags.rarest = lambda *_: None
        try:
            return len(json.loads(pages.page_text(services, PRINCIPAL, query))["items"])
        finally:
            rare_tags.rarest = chooses

    return run


def measure(sized: dict[int, Services], repeats: int) -> dict[int, dict[str, Measured]]:
    """Time every query at every size, the sizes interleaved run by run so that the load of
    a shared machine weighs on both sides of each ratio alike."""
    cursors = {count: _page_100_cursor(services) for count, services in sized.items()}
    results: dict[int, dict[str, Measured]] = {count: {} for count in sized}
    for label, params in QUERIES.items():
        runs = {}
        for count, services in sized.items():
            extra = [("next", cursors[count])] if label.startswith("page 100") else []
            items = list(params.items()) if isinstance(params, dict) else list(params)
            runs[count] = _runner(services, items + extra, walked="walked" in label)
            assert runs[count]() > 0 or label in EXTRA_QUERIES, (label, count)
        timings: dict[int, list[float]] = {count: [] for count in sized}
        for _ in range(repeats):
            for count, run in runs.items():
                started = time.perf_counter()
                run()
                timings[count].append((time.perf_counter() - started) * 1000)
        for count, values in timings.items():
            values.sort()
            results[count][label] = Measured(
                p50=statistics.median(values),
                p99=values[min(len(values) - 1, int(len(values) * 0.99))],
                explain=explain(sized[count].db, runs[count]),
            )
    return results


def bench_engine(
    engine: str, counts: list[int], repeats: int, workdir: Path
) -> dict[int, dict[str, Measured]]:
    sized: dict[int, Services] = {}
    server = PostgresServer().start() if engine == "postgresql" else None
    try:
        for count in counts:
            if server is not None:
                import psycopg

                name = f"bench_{count}"
                with psycopg.connect(server.dsn(), autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}"')
                url = server.url.rpartition("/")[0] + f"/{name}"
            else:
                url = f"sqlite:///{workdir / f'bench_{count}.db'}"
            database = Database(url)
            database.migrate()
            seconds = load(database, count, seed=count)
            print(f"[{engine}] loaded {count:,} tracesets in {seconds:.1f} s", flush=True)
            settings = Settings(data_dir=workdir / "data", database_url=url, signing_key="bench")
            # Listing signs its cursors with the service's signer; no store is needed.
            signer = UrlSigner(b"bench")
            sized[count] = Services(settings=settings, db=database, store=None, signer=signer)  # type: ignore[arg-type]
        return measure(sized, repeats)
    finally:
        for services in sized.values():
            services.db.dispose()
        if server is not None:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--engines", default="postgresql,sqlite")
    parser.add_argument("--extra", action="store_true", help="also time EXTRA_QUERIES")
    parser.add_argument("--only", help="time only the queries whose label holds this text")
    args = parser.parse_args()
    if args.extra:
        QUERIES.update(EXTRA_QUERIES)
    if args.only:
        for label in [label for label in QUERIES if args.only not in label]:
            del QUERIES[label]
    counts = [BASELINE, args.count]
    with tempfile.TemporaryDirectory(prefix="tracestore-bench-") as tmp:
        for engine in args.engines.split(","):
            results = bench_engine(engine, counts, args.repeats, Path(tmp))
            small, large = results[BASELINE], results[args.count]
            print(f"\n## {engine}: {args.count:,} vs {BASELINE:,} tracesets ({args.repeats} runs)")
            print(f"{'query':30} {'p50 10k':>9} {'p99 10k':>9} {'p50 big':>9} {'p99 big':>9} ratio")
            for label in QUERIES:
                s, b = small[label], large[label]
                print(
                    f"{label:30} {s.p50:8.2f}ms {s.p99:8.2f}ms {b.p50:8.2f}ms {b.p99:8.2f}ms "
                    f"{b.p50 / s.p50:5.2f}"
                )
            for label in QUERIES:
                print(f"\n### EXPLAIN ({engine}, {args.count:,}): {label}\n{large[label].explain}")


if __name__ == "__main__":
    main()
