"""Fixtures of the listing tests: the world of users and workspaces, a catalogue of tracesets."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.support.clock import FakeClock
from tests.support.world import FAMILIES, World, add
from tracestore.server import auth, db
from tracestore.server.services import Services


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
