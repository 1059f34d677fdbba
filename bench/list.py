"""Benchmark of GET /api/v1/tracesets' use case at a million tracesets, on PostgreSQL and SQLite.

Loads N tracesets with varied metadata (and, in the same run, a small baseline of 10,000),
then times the real use case (``listing.page_text``, what the route runs) for seven
queries: the first page unfiltered, page 100 by cursor, a ``workload_family`` filter, a
``workload_family`` + ``shape.global_batch_size`` filter, a ``search`` substring, an inspected fact
(``inspected.gpu_model=H100``, from the ``traceset_facts`` rows each traceset carries) and an
inspected world-size range (``minWorldSize``/``maxWorldSize``). Prints p50/p99 per size, the
large/baseline ratio of each p50 (targets: p50 <= 20 ms at 1M on PostgreSQL, ratio <= 3)
and the EXPLAIN of each query at the large size.

    .venv/bin/python bench/list.py --count 1000000          # the full run
    .venv/bin/python bench/list.py --count 100000 --engines sqlite
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ is sys.path[0]; the repository root is what this script imports from.
sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from typing import Any  # noqa: E402

from sqlalchemy import event, text  # noqa: E402

from tests.pgserver import PostgresServer  # noqa: E402
from tracestore.server import listing, reads  # noqa: E402
from tracestore.server.auth import Principal  # noqa: E402
from tracestore.server.database import Database  # noqa: E402
from tracestore.server.ids import new_id  # noqa: E402
from tracestore.server.listing_query import parse_list_query  # noqa: E402
from tracestore.server.presigned import UrlSigner  # noqa: E402
from tracestore.server.services import Services  # noqa: E402
from tracestore.server.settings import Settings  # noqa: E402

BASELINE = 10_000
TENANTS = {"tenant_a": 20, "tenant_b": 5}  # workspaces per tenant
MEMBER_OF = [f"ws_tenant_a_{i}" for i in range(5)]
FAMILIES = ["llama", "gpt", "mixtral", "deepseek", "qwen", "gemma", "falcon", "mpt", "bloom", "t5"]
FAMILY_WEIGHTS = [20, 15, 10, 10, 10, 10, 8, 7, 5, 5]
SIZES = ["7b", "13b", "34b", "70b", "175b"]
PRECISIONS = ["bf16", "fp16", "fp8", "fp32"]
BATCHES = [256, 512, 1024, 2048, 4096]
QUERIES = {
    "first page": {},
    "page 100 by cursor": {},
    "workload_family=gpt": {"workload_family": "gpt"},
    "family + global_batch_size": {"workload_family": "llama", "shape.global_batch_size": "1024"},
    "search substring": {"search": "Mixtral"},
    "inspected.gpu_model=H100": {"inspected.gpu_model": "H100"},
    "world size 64..256": {"minWorldSize": "64", "maxWorldSize": "256"},
}
# With --extra: queries outside the targets, to show where the design's limits are.
EXTRA_QUERIES = {
    "sort=name:asc": {"sort": "name:asc"},
    "family, sort=name:asc": {"workload_family": "gpt", "sort": "name:asc"},
    "family, sort=size:desc": {"workload_family": "gpt", "sort": "size:desc"},
    "rare family, sort=name:asc": {"workload_family": "t5", "sort": "name:asc"},
    "search a rare term": {"search": "run0000"},
    "rare family (GIN/@>)": {"workload_family": "t5", "precision": "fp32", "parallelism.tp": "8"},
    "rare GPU (B200)": {"inspected.gpu_model": "B200"},
    "GPU + backend + world size": {
        "inspected.gpu_model": "A100",
        "inspected.backend": "nccl",
        "inspected.world_size": "8",
    },
}
# GPU models inspection would find (deviceProperties names), with their weights; "" is none.
GPUS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB", "NVIDIA B200", ""]
GPU_WEIGHTS = [40, 40, 10, 1, 9]
COLUMNS = [
    "id",
    "tenant_id",
    "workspace_id",
    "created_by",
    "name",
    "description",
    "tags",
    "status",
    "scope",
    "created_at",
    "updated_at",
    "expires_at",
    "deleted_at",
    "ttl_days",
    "rank_count",
    "total_size",
    "file_count",
    "hash",
    "metadata_text",
    "workload_metadata",
    "inspection",
    "inspected_world_size",
]
FACT_COLUMNS = ["fact", "value", "traceset_id"]


def _facts(rng: random.Random, traceset_id: str) -> list[tuple[str, str, str]]:
    """The traceset_facts rows of one traceset, as inspection would record them."""
    gpu = rng.choices(GPUS, GPU_WEIGHTS)[0]
    if not gpu:
        return []
    found = {("gpu_model", gpu.lower()), ("backend", "nccl"), ("format", "kineto_json")}
    found.update(("gpu_model", word.lower()) for word in gpu.split())
    return [(fact, value, traceset_id) for fact, value in sorted(found)]


def rows(count: int, seed: int) -> Iterator[tuple[tuple[Any, ...], list[tuple[str, str, str]]]]:
    """Each traceset's row (``COLUMNS``) and its facts (``FACT_COLUMNS``)."""
    rng = random.Random(seed)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    step = 365 * 86400 / count
    workspaces = [(t, f"ws_{t}_{i}") for t, n in TENANTS.items() for i in range(n)]
    for i in range(count):
        created = start + timedelta(seconds=i * step + rng.random() * step)
        tenant, workspace = rng.choice(workspaces)
        family = rng.choices(FAMILIES, FAMILY_WEIGHTS)[0]
        size = rng.choice(SIZES)
        tp, dp, pp = (
            rng.choice([1, 2, 4, 8]),
            rng.choice([1, 2, 4, 8, 16, 32]),
            rng.choice([1, 2, 4]),
        )
        metadata = {
            "workload_family": family,
            "workload_name": f"{family}-{size}",
            "precision": rng.choice(PRECISIONS),
            "shape": {"rankCount": tp * dp * pp, "global_batch_size": rng.choice(BATCHES)},
            "parallelism": {"tp": tp, "dp": dp, "pp": pp},
        }
        text_ = json.dumps(metadata, separators=(",", ":"))
        roll = rng.random()
        scope = "workspace" if roll < 0.85 else "tenant" if roll < 0.95 else "public"
        roll = rng.random()
        status = (
            "ready"
            if roll < 0.92
            else "uploading"
            if roll < 0.96
            else ("upload_failed" if roll < 0.98 else "deleted")
        )
        traceset_id = new_id("ts", now=created.timestamp())
        facts = _facts(rng, traceset_id)
        row = (
            traceset_id,
            tenant,
            workspace,
            "user_bench",
            f"{family}-{size}-{metadata['precision']}-run{rng.getrandbits(24):06x}",
            None,
            "[]",
            status,
            scope,
            created,
            created,
            None,
            None,
            7,
            tp * dp * pp,
            rng.randrange(1, 1 << 40),
            rng.randrange(1, 512),
            None,
            text_,
            text_,
            None,
            tp * dp * pp if facts else None,  # what inspection found, when it found anything
        )
        yield row, facts


def _seed_principals(database: Database) -> None:
    with database.engine.begin() as conn:
        now = datetime.now(UTC)
        for tenant, n in TENANTS.items():
            conn.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES (:i, :i, :n)"),
                {"i": tenant, "n": now},
            )
            for i in range(n):
                conn.execute(
                    text(
                        "INSERT INTO workspaces (id, tenant_id, name, created_at) "
                        "VALUES (:w, :t, :w, :n)"
                    ),
                    {"w": f"ws_{tenant}_{i}", "t": tenant, "n": now},
                )
        conn.execute(
            text(
                "INSERT INTO users (id, tenant_id, name, is_tenant_admin, created_at) "
                "VALUES ('user_bench', 'tenant_a', 'bench', false, :n)"
            ),
            {"n": now},
        )


def _index_definitions(database: Database) -> list[tuple[str, str]]:
    with database.engine.connect() as conn:
        if database.dialect == "postgresql":
            query = (
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'tracesets' "
                "AND indexname <> 'tracesets_pkey'"
            )
        else:
            query = (
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = 'tracesets' AND sql IS NOT NULL"
            )
        return [(r[0], r[1]) for r in conn.execute(text(query))]


def load(database: Database, count: int, seed: int) -> float:
    """Insert ``count`` tracesets with the migration's secondary indexes dropped, then rebuild
    them from their own definitions (much faster than maintaining them row by row)."""
    started = time.perf_counter()
    _seed_principals(database)
    indexes = _index_definitions(database)
    with database.engine.begin() as conn:
        for name, _ in indexes:
            conn.exec_driver_sql(f"DROP INDEX {name}")
    raw = database.engine.raw_connection()
    try:
        if database.dialect == "postgresql":
            with raw.cursor() as cursor:  # type: ignore[attr-defined]
                columns = ", ".join(COLUMNS)
                facts: list[tuple[str, str, str]] = []
                with cursor.copy(f"COPY tracesets ({columns}) FROM STDIN") as copy:
                    for row, held in rows(count, seed):
                        copy.write_row(row)
                        facts.extend(held)
                fact_columns = ", ".join(FACT_COLUMNS)
                with cursor.copy(f"COPY traceset_facts ({fact_columns}) FROM STDIN") as copy:
                    for fact in facts:
                        copy.write_row(fact)
        else:
            fmt = "%Y-%m-%d %H:%M:%S.%f"
            marks = ", ".join("?" * len(COLUMNS))
            sql = f"INSERT INTO tracesets ({', '.join(COLUMNS)}) VALUES ({marks})"
            cursor = raw.cursor()
            cursor.execute("BEGIN")
            batch: list[tuple[Any, ...]] = []
            fact_batch: list[tuple[str, str, str]] = []
            fact_sql = f"INSERT INTO traceset_facts ({', '.join(FACT_COLUMNS)}) VALUES (?, ?, ?)"
            for row, held in rows(count, seed):
                stamp = row[9].strftime(fmt)
                batch.append((*row[:9], stamp, stamp, *row[11:]))
                fact_batch.extend(held)
                if len(batch) == 50_000:
                    cursor.executemany(sql, batch)
                    cursor.executemany(fact_sql, fact_batch)
                    batch, fact_batch = [], []
            cursor.executemany(sql, batch)
            cursor.executemany(fact_sql, fact_batch)
            cursor.execute("COMMIT")
        raw.commit()
    finally:
        raw.close()
    with database.engine.begin() as conn:
        for _, definition in indexes:
            conn.exec_driver_sql(definition)
        # PostgreSQL's autovacuum gathers statistics; nothing runs SQLite's ANALYZE, so the
        # SQLite store is measured without statistics, as its users' planner sees it.
        if database.dialect == "postgresql":
            conn.exec_driver_sql("ANALYZE tracesets, traceset_facts")
    return time.perf_counter() - started


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
        page = json.loads(listing.page_text(services, PRINCIPAL, query))
        cursor = page["pagination"]["nextCursor"]
        assert isinstance(cursor, str), "fewer than 100 pages"
        query = parse_list_query([("next", cursor)])
    assert cursor is not None
    return cursor


def _runner(services: Services, items: list[tuple[str, str]]) -> Callable[[], int]:
    def run() -> int:
        query = parse_list_query(items)
        return len(json.loads(listing.page_text(services, PRINCIPAL, query))["items"])

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
            runs[count] = _runner(services, list(params.items()) + extra)
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


class _Recording:
    """A DBAPI cursor that notes each statement it is given (``reads.Prepared.run`` sends
    SQLite's selects straight to the cursor, past SQLAlchemy's events)."""

    def __init__(self, cursor: Any, notes: Callable[[str, Any], None]) -> None:
        self._cursor, self._notes = cursor, notes

    def execute(self, statement: str, parameters: Any) -> Any:
        self._notes(statement, parameters)
        return self._cursor.execute(statement, parameters)

    def fetchall(self) -> Any:
        return self._cursor.fetchall()


def explain(database: Database, run: Callable[[], int]) -> str:
    """EXPLAIN of the SELECT the use case sends (captured from the cursor, then re-sent)."""
    captured: list[tuple[str, Any]] = []

    def note(statement: str, parameters: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "tracesets" in statement:
            # A positional list as exec_driver_sql takes it (a tuple).
            captured.append(
                (statement, tuple(parameters) if isinstance(parameters, list) else parameters)
            )

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        note(statement, parameters)

    def prepared_run(self: reads.Prepared, cursor: Any, params: Any) -> Any:
        return sent(self, _Recording(cursor, note), params)

    sent = reads.Prepared.run
    reads.Prepared.run = prepared_run  # type: ignore[method-assign]
    for engine in {database.engine, database.read_engine}:
        event.listen(engine, "before_cursor_execute", capture)
    try:
        run()
    finally:
        reads.Prepared.run = sent  # type: ignore[method-assign]
        for engine in {database.engine, database.read_engine}:
            event.remove(engine, "before_cursor_execute", capture)
    statement, parameters = captured[0]  # the page; the summary query follows it
    prefix = (
        "EXPLAIN (ANALYZE, BUFFERS) "
        if database.dialect == "postgresql"
        else ("EXPLAIN QUERY PLAN ")
    )
    with database.read_engine.connect() as conn:
        result = conn.exec_driver_sql(prefix + statement, parameters).all()
    if database.dialect == "postgresql":
        return "\n".join(str(r[0]) for r in result)
    return "\n".join(f"{'  ' * 0}{r[-1]}" for r in result)


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
    args = parser.parse_args()
    if args.extra:
        QUERIES.update(EXTRA_QUERIES)
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
