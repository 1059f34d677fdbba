"""Which index each arm of the list's SQLite SELECT walks, as a new store's planner chooses
it: without statistics (nothing runs ANALYZE), so by the query's terms alone."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tracestore.server.auth import Principal
from tracestore.server.db.database import Database
from tracestore.server.listing import plan as listing_plan
from tracestore.server.listing import sql
from tracestore.server.listing.query import parse_list_query

PRINCIPAL = Principal(
    user_id="user_a",
    tenant_id="tenant_a",
    workspace_ids=frozenset({"ws_a", "ws_b"}),
    default_workspace_id="ws_a",
)


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Database:
    path: Path = tmp_path_factory.mktemp("plans") / "plans.db"
    database = Database(f"sqlite:///{path}")
    database.migrate()
    return database


def _arm_indexes(
    database: Database, items: list[tuple[str, str]], after: list[Any] | None = None
) -> list[str]:
    """The index each arm searches, in the union's order (the last search is the join);
    ``after``: a cursor's values."""
    shape, values = listing_plan.plan(PRINCIPAL, parse_list_query(items), "sqlite", after)
    compiled = sql.statement(shape).compile(database.engine)
    params = compiled.construct_params(values)
    positional = tuple(params[name] for name in compiled.positiontup or ())
    with database.read_engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), positional).all()
    searches = [
        row[-1] for row in plan if row[-1].startswith(("SEARCH tracesets", "SCAN tracesets"))
    ]
    indexes = [re.sub(r".* USING (COVERING )?INDEX (\w+).*", r"\2", s) for s in searches]
    assert indexes[-1] == "sqlite_autoindex_tracesets_1", searches  # the join back by id
    return indexes[:-1]


@pytest.mark.parametrize(
    ("sort", "key"),
    [("created:desc", "created"), ("name:asc", "name"), ("size:desc", "total_size")],
)
def test_a_workspace_arm_walks_its_workspace_not_every_workspace_scoped_row(
    database: Database, sort: str, key: str
) -> None:
    # Before "+scope", the planner took scope = 'workspace' for as good a key as the
    # workspace and walked every tenant's workspace-scoped rows (at 200,000 tracesets, a
    # family filter sorted by name: 317 ms a page).
    indexes = _arm_indexes(database, [("sort", sort)])
    assert indexes == [
        f"ix_tracesets_workspace_{key}",
        f"ix_tracesets_workspace_{key}",
        f"ix_tracesets_scope_tenant_{key}",
        f"ix_tracesets_scope_{key}",
    ]


def test_a_family_filter_walks_the_family_indexes(database: Database) -> None:
    indexes = _arm_indexes(database, [("workload_family", "llama")])
    assert indexes == [
        "ix_tracesets_workspace_family_created",
        "ix_tracesets_workspace_family_created",
        "ix_tracesets_scope_tenant_family_created",
        "ix_tracesets_scope_family_created",
    ]
    # Oldest first, the same walk.
    assert (
        _arm_indexes(database, [("workload_family", "llama"), ("sort", "created:asc")]) == indexes
    )


def test_a_family_filter_on_one_scope_walks_that_scopes_index(database: Database) -> None:
    assert _arm_indexes(database, [("workload_family", "gpt"), ("scope", "tenant")]) == [
        "ix_tracesets_scope_tenant_family_created"
    ]
    assert _arm_indexes(database, [("workload_family", "gpt"), ("scope", "public")]) == [
        "ix_tracesets_scope_family_created"
    ]


@pytest.mark.parametrize("direction", ["desc", "asc"])
def test_a_step_time_sort_walks_the_analysed_index_then_the_creation_index(
    database: Database, direction: str
) -> None:
    # Each arm is two parts: the analysed tracesets on migration 0009's partial index of the
    # arm, in step-time order; then the others on the arm's creation index.
    indexes = _arm_indexes(database, [("sort", f"step_time:{direction}")])
    assert indexes == [
        "ix_tracesets_workspace_step_time",
        "ix_tracesets_workspace_created",
        "ix_tracesets_workspace_step_time",
        "ix_tracesets_workspace_created",
        "ix_tracesets_scope_tenant_step_time",
        "ix_tracesets_scope_tenant_created",
        "ix_tracesets_scope_step_time",
        "ix_tracesets_scope_created",
    ]


def test_a_step_time_page_after_the_first_walks_the_same_indexes(database: Database) -> None:
    created = "2026-12-06 10:00:00.000000"
    analysed = _arm_indexes(database, [("sort", "step_time:desc")], [(1500.0, created), "ts_x"])
    assert analysed == _arm_indexes(database, [("sort", "step_time:desc")])
    # Past every analysed traceset: only the creation indexes, from the cursor on.
    past = _arm_indexes(database, [("sort", "step_time:desc")], [(None, created), "ts_x"])
    assert past == [
        "ix_tracesets_workspace_created",
        "ix_tracesets_workspace_created",
        "ix_tracesets_scope_tenant_created",
        "ix_tracesets_scope_created",
    ]


def test_the_analysis_filters_keep_the_arms_ordered_walk(database: Database) -> None:
    # As the world-size range: SQLite would range-scan the median's index and sort every
    # match; the filter is checked on the walk in creation order, which stops after a page.
    for items in (
        [("maxIdlePct", "20")],
        [("minIdlePct", "5"), ("minOverlapPct", "50")],
    ):
        assert _arm_indexes(database, items) == [
            "ix_tracesets_workspace_created",
            "ix_tracesets_workspace_created",
            "ix_tracesets_scope_tenant_created",
            "ix_tracesets_scope_created",
        ]


def test_an_uploader_filter_walks_the_uploaders_indexes(database: Database) -> None:
    # Migration 0010: an uploader's tracesets per arm in created order, not every row of
    # the arm checked for its uploader (a rare uploader: the whole arm).
    for items in ([("uploadedBy", "me")], [("uploadedBy", "user_b"), ("sort", "created:asc")]):
        assert _arm_indexes(database, items) == [
            "ix_tracesets_creator_workspace_created",
            "ix_tracesets_creator_workspace_created",
            "ix_tracesets_creator_scope_created",
            "ix_tracesets_creator_scope_created",
        ]


def test_a_tag_filter_keeps_the_arms_ordered_walk(database: Database) -> None:
    # As the inspected facts: each row walked is a primary-key lookup of (tag, id).
    assert _arm_indexes(database, [("tag", "llama"), ("tag", "baseline")]) == [
        "ix_tracesets_workspace_created",
        "ix_tracesets_workspace_created",
        "ix_tracesets_scope_tenant_created",
        "ix_tracesets_scope_created",
    ]


@pytest.mark.parametrize(
    "items",
    [
        [("tag", "regression")],
        [("tag", "regression"), ("tag", "nightly"), ("sort", "step_time:desc")],
        [("tag", "regression"), ("uploadedBy", "me"), ("sort", "name:asc")],
        [("tag", "regression"), ("workload_family", "llama"), ("scope", "tenant")],
    ],
)
def test_a_rare_tag_drives_its_page_from_the_tags_rows(
    database: Database, items: list[tuple[str, str]]
) -> None:
    # rare_tags.RARE_TAG: the tag's rows, each traceset looked up by id, then sorted; with no
    # statistics SQLite took a workspace's or an uploader's index for ten rows and walked it.
    shape, values = listing_plan.plan(
        PRINCIPAL, parse_list_query(items), "sqlite", None, "regression"
    )
    compiled = sql.statement(shape).compile(database.engine)
    params = compiled.construct_params(values)
    positional = tuple(params[name] for name in compiled.positiontup or ())
    with database.read_engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), positional).all()
    steps = [row[-1] for row in plan if row[-1].startswith(("SEARCH", "SCAN"))]
    assert steps[:2] == [
        "SEARCH tagged USING COVERING INDEX sqlite_autoindex_traceset_tags_1 (tag=?)",
        "SEARCH tracesets USING INDEX sqlite_autoindex_tracesets_1 (id=?)",
    ], steps
    assert not [s for s in steps if "tracesets" in s and "(id=?)" not in s], steps


def _fact_searches(database: Database, items: list[tuple[str, str]]) -> list[str]:
    """How the statement reads ``traceset_facts``, each search as the planner words it."""
    shape, values = listing_plan.plan(PRINCIPAL, parse_list_query(items), "sqlite", None)
    compiled = sql.statement(shape).compile(database.engine)
    params = compiled.construct_params(values)
    positional = tuple(params[name] for name in compiled.positiontup or ())
    with database.read_engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), positional).all()
    return [row[-1] for row in plan if "traceset_facts" in row[-1]]


@pytest.mark.parametrize("verdict", ["fail", "pass", "unknown"])
def test_the_census_filter_keeps_the_ordered_walk_and_looks_each_row_up(
    database: Database, verdict: str
) -> None:
    # The verdict is a fact: each candidate row is one lookup of the facts' primary key
    # (fact, value, id), on the walk in the sort's order, which stops after a page.
    assert _arm_indexes(database, [("census", verdict)]) == [
        "ix_tracesets_workspace_created",
        "ix_tracesets_workspace_created",
        "ix_tracesets_scope_tenant_created",
        "ix_tracesets_scope_created",
    ]
    searches = _fact_searches(database, [("census", verdict)])
    lookups = [s for s in searches if "sqlite_autoindex_traceset_facts_1" in s]
    assert len(lookups) == 4, searches  # one per arm
    assert all("(fact=? AND value=? AND traceset_id=?)" in s for s in lookups), lookups


def test_a_pages_census_is_read_through_the_facts_traceset_index(database: Database) -> None:
    # The page's rows' verdicts and missing ranks: never the primary key's (fact, ...)
    # prefix, which would walk every traceset's census.
    searches = _fact_searches(database, [])
    assert len(searches) == 2, searches
    assert all("INDEX ix_traceset_facts_traceset (traceset_id=?)" in s for s in searches)
