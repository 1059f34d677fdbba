"""GET /api/v1/tracesets (SPEC 5.6): filters, sorts, cursors, visibility, on the real app.

Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL (through the shared fixtures).
Tracesets are inserted through the ORM: the list reads records, not bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, select

from tests.conftest import FakeClock
from tracestore.server import auth, db
from tracestore.server.app import create_app
from tracestore.server.ids import new_id
from tracestore.server.listing import encode_cursor
from tracestore.server.listing_sql import MAX_WORKSPACE_ARMS
from tracestore.server.services import Services

LIST = "/api/v1/tracesets"
ITEM_KEYS = {
    "id",
    "name",
    "status",
    "scope",
    "workspaceId",
    "fileCount",
    "totalSize",
    "rankCountDerived",
    "createdAt",
    "workload",
}


@dataclass
class World:
    """Two tenants; the admin (default workspace + ws1), alice (ws1), bob (ws2), carol (tenant
    B's wsb). Each user has an httpx client on the app."""

    services: Services
    tenant: str
    other_tenant: str
    default_ws: str
    ws1: str
    ws2: str
    wsb: str
    users: dict[str, str]
    clients: dict[str, httpx.Client]


@pytest.fixture
def world(services: Services, http: TestClient, clock: FakeClock) -> Iterator[World]:
    now = clock()
    with services.db.session() as session:
        admin = session.scalar(select(db.User).where(db.User.name == "admin"))
        assert admin is not None and admin.default_workspace_id is not None
        tenant = admin.tenant_id
        ws1 = auth.create_workspace(session, tenant, "ws1", now)
        ws2 = auth.create_workspace(session, tenant, "ws2", now)
        other = auth.create_tenant(session, "other", now)
        session.flush()
        wsb = auth.create_workspace(session, other.id, "wsb", now)
        session.flush()
        auth.add_member(session, admin.id, ws1.id)
        alice = auth.create_user(session, tenant, "alice", now, workspace_ids=[ws1.id])
        bob = auth.create_user(session, tenant, "bob", now, workspace_ids=[ws2.id])
        carol = auth.create_user(session, other.id, "carol", now, workspace_ids=[wsb.id])
        tokens = {
            name: auth.issue_token(session, user.id, "test", now).token
            for name, user in (("alice", alice), ("bob", bob), ("carol", carol))
        }
        users = {"admin": admin.id, "alice": alice.id, "bob": bob.id, "carol": carol.id}
        ids = (tenant, other.id, admin.default_workspace_id, ws1.id, ws2.id, wsb.id)
    clients: dict[str, httpx.Client] = {"admin": http}
    extra: list[TestClient] = []
    for name, token in tokens.items():
        client = TestClient(http.app, raise_server_exceptions=False)
        client.headers["Authorization"] = f"Bearer {token}"
        clients[name] = client
        extra.append(client)
    yield World(services, *ids, users=users, clients=clients)
    for client in extra:
        client.close()


_counter = itertools.count()


def add(
    world: World,
    workspace: str | None = None,
    *,
    name: str | None = None,
    created: datetime | None = None,
    status: str = "ready",
    scope: str = "workspace",
    size: int = 100,
    rank_count: int | None = 8,
    metadata: Any = None,
    tenant: str | None = None,
) -> str:
    """Insert one traceset record; its id."""
    services = world.services
    traceset_id = new_id("ts")
    with services.db.session() as session:
        session.execute(
            insert(db.Traceset),
            [
                _row(
                    traceset_id,
                    tenant or world.tenant,
                    workspace or world.default_ws,
                    world.users["admin"],
                    name or f"ts-{next(_counter):05d}",
                    created or services.now(),
                    status,
                    scope,
                    size,
                    rank_count,
                    metadata,
                )
            ],
        )
    return traceset_id


def _row(
    traceset_id: str,
    tenant: str,
    workspace: str,
    user: str,
    name: str,
    created: datetime,
    status: str,
    scope: str,
    size: int,
    rank_count: int | None,
    metadata: Any,
) -> dict[str, Any]:
    import json

    return {
        "id": traceset_id,
        "tenant_id": tenant,
        "workspace_id": workspace,
        "created_by": user,
        "name": name,
        "tags": [],
        "status": status,
        "scope": scope,
        "created_at": created,
        "updated_at": created,
        "expires_at": None,
        "ttl_days": 7,
        "rank_count": rank_count,
        "total_size": size,
        "file_count": 1,
        "metadata_text": None if metadata is None else json.dumps(metadata),
        "workload_metadata": metadata,
    }


def list_all(client: httpx.Client, params: dict[str, Any], limit: int = 3) -> list[dict[str, Any]]:
    """Every item of every page, following nextCursor."""
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(10_000):
        query = {**params, "limit": limit, **({"next": cursor} if cursor else {})}
        response = client.get(LIST, params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["pagination"]["count"] == len(page["items"])
        items.extend(page["items"])
        cursor = page["pagination"]["nextCursor"]
        assert page["pagination"]["hasMore"] == (cursor is not None)
        if cursor is None:
            return items
    raise AssertionError("too many pages")


def names(items: list[dict[str, Any]]) -> list[str]:
    return [item["name"] for item in items]


# --- a fixed catalogue for the filter and sort tables ---

FAMILIES = ["llama", "gpt", "mixtral"]


@pytest.fixture
def catalogue(world: World, clock: FakeClock) -> list[dict[str, Any]]:
    """24 tracesets with varied fields, many ties on every sort key. Each record also keeps
    the fields as the test expects them to be listed."""
    base = clock()
    records: list[dict[str, Any]] = []
    statuses = ["ready", "ready", "uploading", "upload_failed"]
    for i in range(24):
        family = FAMILIES[i % 3]
        metadata: dict[str, Any] = {
            "workload_family": family,
            "workload_name": f"{family}-{i % 2}",
            "precision": "bf16" if i % 2 else "fp8",
            "shape": {"global_batch_size": 1024 if i % 4 == 0 else 512, "seq_len": 4096},
            "parallelism": {"tp": [1, 2, 4, 8][i % 4], "dp": 2},
        }
        record: dict[str, Any] = {
            "name": f"{['alpha', 'Beta', 'gamma'][i % 3]}-run-{i % 5}",
            "created": base + timedelta(seconds=i // 4),  # four tracesets per second: ties
            "status": statuses[i % 4],
            "size": [10, 20, 20, 30][i % 4],
            "rank_count": None if i % 6 == 5 else [8, 16, 16][i % 3],
            "metadata": metadata,
        }
        record["id"] = add(
            world,
            name=record["name"],
            created=record["created"],
            status=record["status"],
            size=record["size"],
            rank_count=record["rank_count"],
            metadata=metadata,
        )
        records.append(record)
    return records


def _member(record: dict[str, Any], path: str) -> Any:
    node: Any = record["metadata"]
    for segment in path.split("."):
        node = node.get(segment) if isinstance(node, dict) else None
    return node


Predicate = Callable[[dict[str, Any]], bool]

FILTER_CASES: list[tuple[dict[str, Any], Predicate]] = [
    ({}, lambda r: True),
    ({"status": "ready"}, lambda r: r["status"] == "ready"),
    ({"status": "uploading"}, lambda r: r["status"] == "uploading"),
    ({"status": "upload_failed"}, lambda r: r["status"] == "upload_failed"),
    ({"scope": "workspace"}, lambda r: True),
    ({"scope": "public"}, lambda r: False),
    ({"search": "BETA"}, lambda r: "beta" in r["name"].lower()),
    ({"search": "run-3"}, lambda r: "run-3" in r["name"]),
    ({"search": "a-r"}, lambda r: "a-r" in r["name"].lower()),
    ({"search": "%"}, lambda r: False),
    ({"search": "_"}, lambda r: False),
    ({"minRankCount": 16}, lambda r: r["rank_count"] is not None and r["rank_count"] >= 16),
    ({"maxRankCount": 8}, lambda r: r["rank_count"] is not None and r["rank_count"] <= 8),
    ({"minRankCount": 9, "maxRankCount": 16}, lambda r: r["rank_count"] == 16),
    ({"workload_family": "gpt"}, lambda r: _member(r, "workload_family") == "gpt"),
    ({"workload_name": "llama-1"}, lambda r: _member(r, "workload_name") == "llama-1"),
    ({"precision": "fp8"}, lambda r: _member(r, "precision") == "fp8"),
    ({"shape.global_batch_size": "1024"}, lambda r: _member(r, "shape.global_batch_size") == 1024),
    ({"shape.global_batch_size": '"1024"'}, lambda r: False),
    ({"parallelism.tp": "8"}, lambda r: _member(r, "parallelism.tp") == 8),
    ({"parallelism.tp": "8.0"}, lambda r: _member(r, "parallelism.tp") == 8),
    ({"parallelism.pp": "1"}, lambda r: False),
    ({"shape": "1"}, lambda r: False),
    (
        {"workload_family": "llama", "shape.global_batch_size": "1024"},
        lambda r: (
            _member(r, "workload_family") == "llama"
            and _member(r, "shape.global_batch_size") == 1024
        ),
    ),
    (
        {"workload_family": "mixtral", "parallelism.tp": "2", "status": "uploading"},
        lambda r: (
            _member(r, "workload_family") == "mixtral"
            and _member(r, "parallelism.tp") == 2
            and r["status"] == "uploading"
        ),
    ),
    (
        {"search": "gamma", "minRankCount": 16, "precision": "bf16"},
        lambda r: (
            "gamma" in r["name"]
            and r["rank_count"] is not None
            and r["rank_count"] >= 16
            and _member(r, "precision") == "bf16"
        ),
    ),
]


def _expected(records: list[dict[str, Any]], predicate: Predicate) -> list[str]:
    chosen = [r for r in records if predicate(r)]
    chosen.sort(key=lambda r: (r["created"], r["id"]), reverse=True)
    return [r["id"] for r in chosen]


@pytest.mark.parametrize(("params", "predicate"), FILTER_CASES, ids=lambda v: str(v)[:60])
def test_each_filter_and_combination_selects_exactly_the_matching_tracesets(
    world: World,
    catalogue: list[dict[str, Any]],
    params: dict[str, Any],
    predicate: Predicate,
) -> None:
    items = list_all(world.clients["admin"], params, limit=4)
    assert [item["id"] for item in items] == _expected(catalogue, predicate)


def test_created_after_is_inclusive_and_created_before_exclusive(
    world: World, catalogue: list[dict[str, Any]]
) -> None:
    start = catalogue[8]["created"]  # the third second
    end = catalogue[16]["created"]
    stamp = {"createdAfter": start.isoformat(), "createdBefore": end.isoformat()}
    items = list_all(world.clients["admin"], stamp)
    expected = _expected(catalogue, lambda r: start <= r["created"] < end)
    assert [i["id"] for i in items] == expected and len(expected) == 8
    zulu = start.isoformat().replace("+00:00", "Z")
    assert len(list_all(world.clients["admin"], {"createdAfter": zulu})) == 16


def _sort_key(field: str, record: dict[str, Any]) -> Any:
    if field == "created":
        return record["created"]
    if field == "name":
        return record["name"].encode()
    if field == "rankCount":
        return record["rank_count"]
    return record[field]


def _sorted_ids(records: list[dict[str, Any]], sort: str) -> list[str]:
    keys = [(part.split(":")[0], part.split(":")[1] == "desc") for part in sort.split(",")]
    ordered = sorted(records, key=lambda r: r["id"], reverse=keys[-1][1])
    for field, descending in reversed(keys):
        if field == "rankCount":
            present = [r for r in ordered if r["rank_count"] is not None]
            present.sort(key=lambda r: r["rank_count"], reverse=descending)
            ordered = present + [r for r in ordered if r["rank_count"] is None]
        else:
            ordered.sort(key=lambda r, f=field: _sort_key(f, r), reverse=descending)  # type: ignore[misc]
    return [r["id"] for r in ordered]


SORTS = [
    "created:desc",
    "created:asc",
    "name:asc",
    "name:desc",
    "status:asc",
    "status:desc",
    "size:asc",
    "size:desc",
    "rankCount:asc",
    "rankCount:desc",
    "name:asc,created:desc",
    "status:desc,size:asc,name:desc",
    "rankCount:desc,name:asc",
    "size:desc,rankCount:asc,created:asc",
]


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("limit", [1, 5])
def test_sorts_page_through_ties_in_a_stable_order(
    world: World, catalogue: list[dict[str, Any]], sort: str, limit: int
) -> None:
    items = list_all(world.clients["admin"], {"sort": sort}, limit=limit)
    assert [i["id"] for i in items] == _sorted_ids(catalogue, sort)


@pytest.mark.parametrize("sort", ["created:desc", "name:asc", "size:desc,rankCount:asc"])
def test_sort_and_filters_combine(world: World, catalogue: list[dict[str, Any]], sort: str) -> None:
    params = {"sort": sort, "workload_family": "llama", "status": "ready"}
    items = list_all(world.clients["admin"], params, limit=2)
    chosen = [
        r for r in catalogue if _member(r, "workload_family") == "llama" and r["status"] == "ready"
    ]
    assert [i["id"] for i in items] == _sorted_ids(chosen, sort) and chosen


def test_the_default_sort_is_newest_first_and_items_have_the_spec_shape(
    world: World, clock: FakeClock
) -> None:
    older = add(world, name="older", metadata={"workload_family": "llama", "other": 1})
    clock.advance(seconds=1)
    newer = add(world, name="newer", rank_count=None, size=7)
    page = world.clients["admin"].get(LIST).json()
    assert [item["id"] for item in page["items"]] == [newer, older]
    assert page["pagination"] == {"count": 2, "hasMore": False, "nextCursor": None}
    item = page["items"][1]
    assert set(item) == ITEM_KEYS
    assert item["workload"] == {"workload_family": "llama", "workload_name": None}
    assert item["createdAt"].endswith("Z")
    assert item["workspaceId"] == world.default_ws and item["scope"] == "workspace"
    assert page["items"][0]["rankCountDerived"] is None and page["items"][0]["totalSize"] == 7


def test_pages_neither_skip_nor_repeat_while_tracesets_are_added(
    world: World, clock: FakeClock
) -> None:
    original = {add(world, name=f"n{i % 4}", size=i % 3) for i in range(30)}
    clock.advance(seconds=1)
    for sort in ("created:desc", "created:asc", "name:asc", "size:desc"):
        seen: list[str] = []
        cursor = None
        for page_number in range(100):
            params: dict[str, Any] = {"sort": sort, "limit": 4}
            if cursor:
                params["next"] = cursor
            page = world.clients["admin"].get(LIST, params=params).json()
            seen.extend(item["id"] for item in page["items"])
            cursor = page["pagination"]["nextCursor"]
            # Newcomers at every position of the order, same timestamp as others included
            # (only for a while: after the cursor, in created:asc, they would never end).
            if page_number < 5:
                for name in ("n0", "n2", "zz", "a"):
                    add(world, name=name, size=1)
                clock.advance(microseconds=1)
            if cursor is None:
                break
        assert len(seen) == len(set(seen)), sort
        assert original <= set(seen), sort


def test_camel_case_members_are_not_matched_and_camel_case_parameters_refused(
    world: World,
) -> None:
    snake = add(world, metadata={"workload_family": "llama", "shape": {"global_batch_size": 8}})
    add(world, metadata={"workloadFamily": "llama", "shape": {"globalBatchSize": 8}})
    client = world.clients["admin"]
    assert [i["id"] for i in list_all(client, {"workload_family": "llama"})] == [snake]
    assert [i["id"] for i in list_all(client, {"shape.global_batch_size": 8})] == [snake]
    for name in ("workloadFamily", "shape.globalBatchSize"):
        response = client.get(LIST, params={name: "llama"})
        assert response.status_code == 400
        assert f"'{name}'" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("stored", "query", "matches"),
    [
        (1024, "1024", True),
        ("1024", "1024", False),
        ("1024", '"1024"', True),
        (1024, '"1024"', False),
        (2.5, "2.5", True),
        (2.0, "2", True),
        (True, "true", True),
        (True, "1", False),
        (1, "true", False),
        (False, "false", True),
        (None, "null", True),
        ("null", "null", False),
        ("llama 3", "llama 3", True),
        ("Llama", "llama", False),
        ({"a": 1}, "1", False),
        ([1, 2], "1", False),
        ("[1]", "[1]", True),
    ],
)
def test_workload_filters_are_json_typed(
    world: World, stored: Any, query: str, matches: bool
) -> None:
    wanted = add(world, metadata={"shape": {"x": stored}})
    add(world, metadata={"shape": {"y": stored}})
    add(world, metadata={"shape": None})
    add(world)
    found = [i["id"] for i in list_all(world.clients["admin"], {"shape.x": query})]
    assert found == ([wanted] if matches else [])


BAD_PARAMETERS: list[tuple[dict[str, Any], str]] = [
    (
        {"sort": "x"},
        "Invalid sort field: 'x'. Valid fields: created, name, status, size, rankCount",
    ),
    ({"sort": "created_at:desc"}, "Invalid sort field: 'created_at'"),
    ({"sort": ""}, "Invalid sort field: ''"),
    ({"sort": "name:up"}, "'up' for 'name' in sort"),
    ({"sort": "name,name:desc"}, "'name' is given more than once in sort"),
    ({"limit": "abc"}, "limit must be an integer from 1 to 100; got 'abc'"),
    ({"limit": "0"}, "limit must be an integer"),
    ({"limit": "101"}, "limit must be an integer"),
    ({"limit": "2.0"}, "limit must be an integer"),
    ({"createdAfter": "yesterday"}, "createdAfter must be an RFC 3339 timestamp"),
    ({"createdBefore": "2026-11-30T09:00:00"}, "createdBefore must be an RFC 3339"),
    ({"createdBefore": "2026-13-30"}, "createdBefore must be"),
    ({"status": "gone"}, "Invalid status: 'gone'. Valid statuses: uploading, ready, upload_failed"),
    ({"status": "Ready"}, "Invalid status: 'Ready'"),
    ({"scope": "world"}, "Invalid scope: 'world'"),
    ({"minRankCount": "many"}, "minRankCount must be an integer"),
    ({"maxRankCount": "1.5"}, "maxRankCount must be an integer"),
    ({"workloadFamily": "llama"}, "Unknown query parameter 'workloadFamily'"),
    ({"Status": "ready"}, "Unknown query parameter 'Status'"),
    ({"shape..x": "1"}, "Unknown query parameter 'shape..x'"),
    ({"shape.x-y": "1"}, "Unknown query parameter 'shape.x-y'"),
    ({".x": "1"}, "Unknown query parameter '.x'"),
    ({"next": "garbage"}, "Invalid cursor in 'next'"),
    ({"workspaceId": ""}, "workspaceId"),
]


@pytest.mark.parametrize(("params", "message"), BAD_PARAMETERS, ids=lambda v: str(v)[:40])
def test_every_bad_parameter_is_a_400_naming_it(
    world: World, params: dict[str, Any], message: str
) -> None:
    response = world.clients["admin"].get(LIST, params=params)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and message in error["message"], error


def test_a_parameter_given_twice_is_refused(world: World) -> None:
    response = world.clients["admin"].get(f"{LIST}?status=ready&status=deleted")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Query parameter 'status' is given more than once"


def _first_cursor(client: httpx.Client, params: dict[str, Any]) -> str:
    page = client.get(LIST, params={**params, "limit": 2}).json()
    cursor = page["pagination"]["nextCursor"]
    assert isinstance(cursor, str)
    return cursor


def test_tampered_foreign_and_replayed_cursors_are_refused(
    world: World, catalogue: list[dict[str, Any]]
) -> None:
    client = world.clients["admin"]
    params: dict[str, Any] = {"sort": "name:asc", "workload_family": "llama"}
    cursor = _first_cursor(client, params)
    ok = client.get(LIST, params={**params, "next": cursor, "limit": 50})
    assert ok.status_code == 200 and ok.json()["pagination"]["count"] == 6
    payload, _, signature = cursor.partition(".")
    tampered = [
        payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1] + "." + signature,
        payload + "." + signature[:-1] + ("A" if signature[-1] != "A" else "B"),
        payload,
        "." + signature,
        cursor + "x",
        cursor + "é",
        "é." + signature,
        encode_cursor(b"another service's key", "x", ["a", "ts_1"]),
    ]
    for bad in tampered:
        response = client.get(LIST, params={**params, "next": bad})
        assert response.status_code == 400, bad
        assert "Invalid cursor in 'next'" in response.json()["error"]["message"]
    replays = [
        {"sort": "name:desc", "workload_family": "llama"},
        {"sort": "name:asc"},
        {"sort": "name:asc", "workload_family": "gpt"},
        {**params, "status": "ready"},
        {**params, "search": "a"},
        {**params, "precision": "fp8"},
        {**params, "minRankCount": 1},
        {**params, "scope": "workspace"},
        {**params, "workspaceId": world.default_ws},
    ]
    for other in replays:
        response = client.get(LIST, params={**other, "next": cursor})
        assert response.status_code == 400, other
        assert "different sort or different filters" in response.json()["error"]["message"]
    # Another caller (alice) may not replay the admin's cursor either.
    response = world.clients["alice"].get(LIST, params={**params, "next": cursor})
    assert response.status_code == 400


@pytest.mark.parametrize(
    ("search", "found"),
    [
        ("ÜNÏCODE", True),
        ("ünïcode ℝun", True),
        ("Σίσυφος", True),
        ("ΣΊΣΥΦ", True),  # a final Σ folds to ς in Python, to σ in PostgreSQL
        ("unicode", False),
        ("%", True),
        ("_", False),
        ("\\", True),
    ],
)
def test_search_ignores_case_beyond_ascii_and_takes_wildcards_literally(
    world: World, search: str, found: bool
) -> None:
    wanted = add(world, name="Ünïcode ℝun Σίσυφος 100% \\x")
    add(world, name="plain")
    items = list_all(world.clients["admin"], {"search": search})
    assert [i["id"] for i in items] == ([wanted] if found else [])


def test_deleted_tracesets_appear_only_when_asked_for(world: World) -> None:
    live = add(world, status="ready")
    gone = add(world, status="deleted")
    client = world.clients["admin"]
    assert [i["id"] for i in list_all(client, {})] == [live]
    assert [i["id"] for i in list_all(client, {"status": "deleted"})] == [gone]


def test_visibility_follows_workspaces_tenants_and_scopes(world: World, clock: FakeClock) -> None:
    made: dict[str, str] = {}
    for workspace, label in ((world.default_ws, "d"), (world.ws1, "1"), (world.ws2, "2")):
        for scope in ("workspace", "tenant", "public"):
            made[f"{label}-{scope}"] = add(world, workspace, name=f"{label}-{scope}", scope=scope)
            clock.advance(seconds=1)
    for scope in ("workspace", "tenant", "public"):
        made[f"b-{scope}"] = add(
            world, world.wsb, name=f"b-{scope}", scope=scope, tenant=world.other_tenant
        )
    tenant_a = {"d-tenant", "1-tenant", "2-tenant"}
    public = {"d-public", "1-public", "2-public", "b-public"}
    cases: list[tuple[str, dict[str, Any], set[str]]] = [
        ("admin", {}, {"d-workspace", "1-workspace"} | tenant_a | public),
        ("alice", {}, {"1-workspace"} | tenant_a | public),
        ("bob", {}, {"2-workspace"} | tenant_a | public),
        ("carol", {}, {"b-workspace", "b-tenant"} | public),
        ("admin", {"workspaceId": world.ws1}, {"1-workspace"} | tenant_a | public),
        ("admin", {"workspaceId": world.default_ws}, {"d-workspace"} | tenant_a | public),
        ("admin", {"scope": "workspace"}, {"d-workspace", "1-workspace"}),
        ("admin", {"scope": "tenant"}, tenant_a),
        ("carol", {"scope": "tenant"}, {"b-tenant"}),
        ("bob", {"scope": "public"}, public),
        ("admin", {"workspaceId": world.ws1, "scope": "workspace"}, {"1-workspace"}),
    ]
    for user, params, expected in cases:
        got = names(list_all(world.clients[user], params, limit=2))
        assert sorted(got) == sorted(expected), (user, params)
        assert len(got) == len(set(got))


def test_naming_a_workspace_the_caller_is_not_in_is_forbidden(world: World) -> None:
    for user, workspace in (("alice", world.ws2), ("carol", world.ws1), ("admin", "workspace_x")):
        response = world.clients[user].get(LIST, params={"workspaceId": workspace})
        assert response.status_code == 403
        assert response.json()["error"] == {
            "code": "FORBIDDEN",
            "message": "You do not have access to this resource",
            "requestId": response.json()["error"]["requestId"],
        }


def test_listing_needs_a_token(services: Services) -> None:
    with TestClient(create_app(services=services), raise_server_exceptions=False) as client:
        response = client.get(LIST)
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Invalid or missing authentication token"


@pytest.mark.slow
def test_walking_every_page_of_5000_tracesets_gets_each_exactly_once(
    world: World, clock: FakeClock
) -> None:
    base = clock()
    rows = [
        _row(
            new_id("ts"),
            world.tenant,
            world.default_ws,
            world.users["admin"],
            f"bulk-{i % 97:02d}",
            base + timedelta(seconds=i // 7),  # ties of seven
            "ready",
            "workspace",
            i % 13,
            None if i % 11 == 0 else i % 5 + 1,
            {"workload_family": FAMILIES[i % 3]},
        )
        for i in range(5000)
    ]
    with world.services.db.session() as session:
        session.execute(insert(db.Traceset), rows)
    expected = {row["id"] for row in rows}
    for sort in ("created:desc", "rankCount:asc,name:desc"):
        items = list_all(world.clients["admin"], {"sort": sort}, limit=100)
        ids = [item["id"] for item in items]
        assert len(ids) == 5000 and set(ids) == expected, sort


def test_a_member_of_many_workspaces_sees_all_of_them_in_one_arm(
    world: World, clock: FakeClock
) -> None:
    count = MAX_WORKSPACE_ARMS + 2
    now = clock()
    with world.services.db.session() as session:
        workspaces = [
            auth.create_workspace(session, world.tenant, f"many-{i}", now) for i in range(count)
        ]
        session.flush()
        for workspace in workspaces:
            auth.add_member(session, world.users["alice"], workspace.id)
    expected = set()
    for i, workspace in enumerate(workspaces):
        expected.add(add(world, workspace.id, name=f"m{i:02d}"))
        clock.advance(seconds=1)
    add(world, world.ws2, name="not alice's")
    client = world.clients["alice"]
    everything = list_all(client, {"scope": "workspace"}, limit=5)
    assert {i["id"] for i in everything} == expected and len(everything) == count
    assert names(everything) == [f"m{i:02d}" for i in reversed(range(count))]
    page = client.get(LIST).json()  # the default limit is 20
    assert page["pagination"]["count"] == count and page["pagination"]["hasMore"] is False
    page = client.get(LIST, params={"limit": 10}).json()
    assert page["pagination"]["count"] == 10 and page["pagination"]["hasMore"] is True
