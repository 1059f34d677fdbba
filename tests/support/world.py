"""The world the listing tests run in: users, workspaces, tracesets inserted as records."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy import insert

from tracestore.server import db
from tracestore.server.ids import new_id
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
    "createdBy",
    "census",
    "missingRanks",
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
                traceset_row(
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


def traceset_row(
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


FAMILIES = ["llama", "gpt", "mixtral"]


def member(record: dict[str, Any], path: str) -> Any:
    """The member of a record's metadata at a dotted path, None where there is none."""
    node: Any = record["metadata"]
    for segment in path.split("."):
        node = node.get(segment) if isinstance(node, dict) else None
    return node
