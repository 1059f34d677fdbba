"""The store ``bench/list.py`` lists: tracesets with varied metadata (workload families, sizes,
precisions, parallelism degrees, scopes and statuses drawn from a seeded generator), the
``traceset_facts`` rows inspection would record for them (the census's verdict too) and,
for most of those with a Kineto trace, the analysis summary's medians (idle and overlap
percentages, step time), their uploaders (the tenant's users, a few prolific) and tags
(``traceset_tags``), loaded in bulk (``COPY`` on PostgreSQL, batched inserts on SQLite) with
the secondary indexes rebuilt after."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from tracestore.inspect.census import census_facts
from tracestore.server.db.database import Database
from tracestore.server.ids import new_id

TENANTS = {"tenant_a": 20, "tenant_b": 5}  # workspaces per tenant
MEMBER_OF = [f"ws_tenant_a_{i}" for i in range(5)]
FAMILIES = ["llama", "gpt", "mixtral", "deepseek", "qwen", "gemma", "falcon", "mpt", "bloom", "t5"]
FAMILY_WEIGHTS = [20, 15, 10, 10, 10, 10, 8, 7, 5, 5]
SIZES = ["7b", "13b", "34b", "70b", "175b"]
PRECISIONS = ["bf16", "fp16", "fp8", "fp32"]
BATCHES = [256, 512, 1024, 2048, 4096]
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
    "median_idle_pct",
    "median_overlap_pct",
    "median_step_time_us",
]
ANALYSED = 0.7  # of the ready tracesets with a Kineto trace: the analysis found steps
FACT_COLUMNS = ["fact", "value", "traceset_id"]
TAG_COLUMNS = ["tag", "traceset_id"]
# Each tenant's uploaders, the first few uploading most (weights 1/(rank+1)); the benchmark's
# caller, user_bench, is tenant_a's fifth (2.2 % of its tracesets), user_tenant_a_49 its
# rarest (0.22 %).
UPLOADERS = {
    t: [f"user_{t}_{i}" for i in range(n)] for t, n in {"tenant_a": 50, "tenant_b": 10}.items()
}
UPLOADERS["tenant_a"][4] = "user_bench"
# Tags and the share of tracesets holding each (drawn apart); one in 10,000 also holds its
# own "run-<n>" tag.
TAGS = {"nightly": 0.3, "baseline": 0.2, "ablation": 0.05, "regression": 0.002}
INCOMPLETE = 0.05  # of the inspected tracesets: their census fails


def _facts(rng: random.Random, traceset_id: str) -> list[tuple[str, str, str]]:
    """The traceset_facts rows of one traceset, as inspection would record them."""
    gpu = rng.choices(GPUS, GPU_WEIGHTS)[0]
    if not gpu:
        return []
    found = {("gpu_model", gpu.lower()), ("backend", "nccl"), ("format", "kineto_json")}
    found.update(("gpu_model", word.lower()) for word in gpu.split())
    # The census's verdict and missing ranks: one inspected traceset in twenty incomplete.
    missing = rng.randint(1, 4) if rng.random() < INCOMPLETE else 0
    failed = {"passed": missing == 0}
    found.update(census_facts({"missingCount": missing, "checks": {"rankCountMatches": failed}}))
    return [(fact, value, traceset_id) for fact, value in sorted(found)]


def _owner_and_tags(rng: random.Random, tenant: str, index: int) -> tuple[str, list[str]]:
    """A traceset's uploader and tags (from their own generator: the other columns stay
    what they were before the store had them)."""
    users = UPLOADERS[tenant]
    uploader = rng.choices(users, [1 / (rank + 1) for rank in range(len(users))])[0]
    tags = [tag for tag, share in TAGS.items() if rng.random() < share]
    if rng.random() < 0.0001:
        tags.append(f"run-{index}")
    return uploader, tags


Row = tuple[tuple[Any, ...], list[tuple[str, str, str]], list[tuple[str, str]]]


def rows(count: int, seed: int) -> Iterator[Row]:
    """Each traceset's row (``COLUMNS``), its facts (``FACT_COLUMNS``) and its tags
    (``TAG_COLUMNS``)."""
    rng = random.Random(seed)
    owners = random.Random(seed + 1)
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
        medians = _medians(rng) if facts and status == "ready" else (None, None, None)
        uploader, tags = _owner_and_tags(owners, tenant, i)
        row = (
            traceset_id,
            tenant,
            workspace,
            uploader,
            f"{family}-{size}-{metadata['precision']}-run{rng.getrandbits(24):06x}",
            None,
            json.dumps(tags),
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
            *medians,
        )
        yield row, facts, [(tag, traceset_id) for tag in tags]


def _medians(rng: random.Random) -> tuple[float | None, float | None, float | None]:
    """An analysed traceset's median idle %, overlap % (None: no communication) and step
    time in µs (None: no steps); all None for one not analysed."""
    if rng.random() >= ANALYSED:
        return None, None, None
    idle = round(rng.betavariate(2, 5) * 100, 2)
    overlap = None if rng.random() < 0.1 else round(rng.random() * 100, 2)
    step = None if rng.random() < 0.05 else round(rng.lognormvariate(12, 1), 3)
    return idle, overlap, step


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
        for tenant, users in UPLOADERS.items():
            for user in users:
                conn.execute(
                    text(
                        "INSERT INTO users (id, tenant_id, name, is_tenant_admin, created_at) "
                        "VALUES (:u, :t, :u, false, :n)"
                    ),
                    {"u": user, "t": tenant, "n": now},
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
                tags: list[tuple[str, str]] = []
                with cursor.copy(f"COPY tracesets ({columns}) FROM STDIN") as copy:
                    for row, held, tagged in rows(count, seed):
                        copy.write_row(row)
                        facts.extend(held)
                        tags.extend(tagged)
                fact_columns = ", ".join(FACT_COLUMNS)
                with cursor.copy(f"COPY traceset_facts ({fact_columns}) FROM STDIN") as copy:
                    for fact in facts:
                        copy.write_row(fact)
                with cursor.copy(
                    f"COPY traceset_tags ({', '.join(TAG_COLUMNS)}) FROM STDIN"
                ) as copy:
                    for tag in tags:
                        copy.write_row(tag)
        else:
            fmt = "%Y-%m-%d %H:%M:%S.%f"
            marks = ", ".join("?" * len(COLUMNS))
            sql = f"INSERT INTO tracesets ({', '.join(COLUMNS)}) VALUES ({marks})"
            cursor = raw.cursor()
            cursor.execute("BEGIN")
            batch: list[tuple[Any, ...]] = []
            fact_batch: list[tuple[str, str, str]] = []
            tag_batch: list[tuple[str, str]] = []
            fact_sql = f"INSERT INTO traceset_facts ({', '.join(FACT_COLUMNS)}) VALUES (?, ?, ?)"
            tag_sql = f"INSERT INTO traceset_tags ({', '.join(TAG_COLUMNS)}) VALUES (?, ?)"
            for row, held, tagged in rows(count, seed):
                stamp = row[9].strftime(fmt)
                batch.append((*row[:9], stamp, stamp, *row[11:]))
                fact_batch.extend(held)
                tag_batch.extend(tagged)
                if len(batch) == 50_000:
                    cursor.executemany(sql, batch)
                    cursor.executemany(fact_sql, fact_batch)
                    cursor.executemany(tag_sql, tag_batch)
                    batch, fact_batch, tag_batch = [], [], []
            cursor.executemany(sql, batch)
            cursor.executemany(fact_sql, fact_batch)
            cursor.executemany(tag_sql, tag_batch)
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
            conn.exec_driver_sql("ANALYZE tracesets, traceset_facts, traceset_tags")
    return time.perf_counter() - started
