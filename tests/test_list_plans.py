"""Which index each arm of the list's SQLite SELECT walks, as a new store's planner chooses
it: without statistics (nothing runs ANALYZE), so by the query's terms alone."""

from __future__ import annotations

import re
from pathlib import Path

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


def _arm_indexes(database: Database, items: list[tuple[str, str]]) -> list[str]:
    """The index each arm searches, in the union's order (the last search is the join)."""
    shape, values = listing_plan.plan(PRINCIPAL, parse_list_query(items), "sqlite", None)
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
