"""Who sees which tracesets in a listing: workspaces, tenants, scopes, tokens."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.world import LIST, World, add, list_all, names
from tracestore.server import auth
from tracestore.server.app import create_app
from tracestore.server.listing.plan import MAX_WORKSPACE_ARMS
from tracestore.server.services import Services


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
        assert assert_error(response, 403, "FORBIDDEN")["message"] == (
            "You do not have access to this resource"
        )


def test_listing_needs_a_token(services: Services) -> None:
    with TestClient(create_app(services=services), raise_server_exceptions=False) as client:
        response = client.get(LIST)
    assert (
        assert_error(response, 401, "UNAUTHORIZED")["message"]
        == "Invalid or missing authentication token"
    )


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
