"""The admin use cases (``server/admin.py``) and the ``token``/``workspace`` commands that
render them."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.tenancy import person
from tracestore.cli import main
from tracestore.errors import NotFound, ValidationError
from tracestore.server import admin, db
from tracestore.server.services import Services

MILLISECONDS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_tokens_are_issued_to_the_admin_by_default_listed_and_revoked(
    services: Services, clock: FakeClock
) -> None:
    with services.db.session(write=False) as session:
        admin_id = admin.first_admin_user(session).id
    issued = admin.create_token(services, name="ci", expires_in_days=3)
    assert (issued.user_id, issued.name) == (admin_id, "ci")
    assert issued.expires_at == clock() + timedelta(days=3)
    assert issued.token.startswith("tst_")

    admin.revoke_token(services, issued.id)
    listed = admin.list_tokens(services)
    assert [t.name for t in listed] == ["admin (bootstrap)", "ci"]
    assert listed[1].revoked_at == clock() and listed[0].revoked_at is None
    assert list(listed[1].model_dump(mode="json", by_alias=True)) == [
        "id",
        "name",
        "userId",
        "createdAt",
        "expiresAt",
        "revokedAt",
    ]

    with pytest.raises(NotFound, match="User 'nobody' not found"):
        admin.create_token(services, user="nobody")
    with pytest.raises(NotFound, match="Token 'nope' not found"):
        admin.revoke_token(services, "nope")


def test_the_first_admin_is_the_bootstrap_admin(services: Services, clock: FakeClock) -> None:
    with services.db.session(write=False) as session:
        first = admin.first_admin_user(session).id
    clock.advance(seconds=1)
    person(services, "second admin", "default", ["default"], admin=True)
    with services.db.session() as session:
        assert admin.first_admin_user(session).id == first
        session.execute(update(db.User).values(is_tenant_admin=False))
        with pytest.raises(NotFound, match="No admin user exists"):
            admin.first_admin_user(session)


def test_workspaces_are_created_in_the_admins_tenant_with_the_admin_in_them(
    services: Services,
) -> None:
    member = person(services, "member", "default", [])
    created = admin.create_workspace(services, "team", [member.user_id])
    with services.db.session(write=False) as session:
        owner = admin.first_admin_user(session)
        members = set(
            session.scalars(
                select(db.Membership.user_id).where(db.Membership.workspace_id == created.id)
            )
        )
    assert created.tenant_id == owner.tenant_id
    assert members == {owner.id, member.user_id}
    assert [w.name for w in admin.list_workspaces(services)] == ["default", "team"]
    with pytest.raises(ValidationError, match="already exists"):
        admin.create_workspace(services, "team")


def test_token_and_workspace_commands_print_what_admin_returns(tmp_path: Path) -> None:
    runner = CliRunner()
    data = ["--data-dir", str(tmp_path / "data")]

    created = runner.invoke(
        main, ["token", "create", *data, "--init", "--expires-in-days", "3", "--json"]
    )
    assert created.exit_code == 0, created.output
    issued = json.loads(created.stdout)
    assert list(issued) == ["id", "token", "userId", "name", "expiresAt"]
    assert issued["name"] == "cli" and MILLISECONDS.fullmatch(issued["expiresAt"])
    human = runner.invoke(main, ["token", "create", *data, "--name", "plain"])
    secret, note = human.stdout.splitlines()
    assert secret.startswith("tst_") and note.endswith(f"user {issued['userId']}; shown once)")

    listed = json.loads(runner.invoke(main, ["token", "list", *data, "--json"]).stdout)
    assert [t["name"] for t in listed] == ["admin (bootstrap)", "cli", "plain"]
    assert all(MILLISECONDS.fullmatch(t["createdAt"]) for t in listed)
    assert runner.invoke(main, ["token", "revoke", *data, issued["id"]]).stdout == (
        f"revoked {issued['id']}\n"
    )
    lines = runner.invoke(main, ["token", "list", *data]).stdout.splitlines()
    assert lines[1] == (
        f"{issued['id']}  {'cli':<20}  {issued['userId']}  revoked  expires {issued['expiresAt']}"
    )
    assert lines[2].endswith("  active")

    team = runner.invoke(main, ["workspace", "create", *data, "team", "--json"])
    workspace = json.loads(team.stdout)
    assert list(workspace) == ["id", "name", "tenantId"] and workspace["name"] == "team"
    listed = json.loads(runner.invoke(main, ["workspace", "list", *data, "--json"]).stdout)
    assert [w["name"] for w in listed] == ["default", "team"]
    assert runner.invoke(main, ["workspace", "list", *data]).stdout.splitlines()[1] == (
        f"{workspace['id']}  team"
    )

    for words, message in (
        (["workspace", "create", *data, "team"], "Workspace 'team' already exists"),
        (["token", "create", *data, "--user", "nobody"], "User 'nobody' not found"),
        (["token", "revoke", *data, "nope"], "Token 'nope' not found"),
    ):
        failed = runner.invoke(main, words)
        assert failed.exit_code == 1 and f"Error: {message}" in failed.stderr


def test_tenants_are_created_with_a_default_workspace_and_listed(services: Services) -> None:
    created = admin.create_tenant(services, "vision")
    assert [w.name for w in created.workspaces] == ["default"]
    assert [t.name for t in admin.list_tenants(services)] == ["default", "vision"]
    with pytest.raises(ValidationError, match="Tenant 'vision' already exists"):
        admin.create_tenant(services, "vision")
    with pytest.raises(ValidationError, match="Tenant name must be 1–255 characters"):
        admin.create_tenant(services, "  ")


def test_users_join_their_tenants_workspaces_and_are_found_by_name(services: Services) -> None:
    admin.create_tenant(services, "vision")
    admin.create_workspace(services, "team")
    ada = admin.create_user(services, "ada", workspaces=["team", "default"], tenant_admin=True)
    assert (ada.tenant_name, ada.workspaces, ada.is_tenant_admin) == (
        "default",
        ["default", "team"],
        True,
    )
    bob = admin.create_user(services, "bob", tenant="vision")
    assert (bob.tenant_name, bob.workspaces) == ("vision", ["default"])
    assert [u.name for u in admin.list_users(services)] == ["admin", "ada", "bob"]
    assert [u.name for u in admin.list_users(services, tenant="vision")] == ["bob"]

    with pytest.raises(ValidationError, match="User 'ada' already exists in tenant 'default'"):
        admin.create_user(services, "ada")
    with pytest.raises(NotFound, match="Workspace 'team' not found in tenant 'vision'"):
        admin.create_user(services, "carol", tenant="vision", workspaces=["team"])
    with pytest.raises(NotFound, match="Tenant 'nowhere' not found"):
        admin.create_user(services, "carol", tenant="nowhere")

    # The same name in two tenants: a token needs the tenant (or the id) to say which.
    admin.create_user(services, "bob")
    with pytest.raises(ValidationError, match="Several users are named 'bob'"):
        admin.create_token(services, user="bob")
    issued = admin.create_token(services, user="bob", tenant="vision")
    assert issued.user_id == bob.id
    assert admin.create_token(services, user=bob.id).user_id == bob.id


def test_a_disabled_user_is_refused_from_the_next_request_on(
    services: Services, http: TestClient
) -> None:
    admin.create_user(services, "ada")
    token = admin.create_token(services, user="ada").token
    headers = {"Authorization": f"Bearer {token}"}
    assert http.get("/api/v1/tracesets", headers=headers).status_code == 200
    disabled = admin.disable_user(services, "ada")
    assert disabled.disabled_at is not None
    refused = http.get("/api/v1/tracesets", headers=headers)
    assert_error(refused, 401, "UNAUTHORIZED")
    with pytest.raises(ValidationError, match="User 'ada' is disabled"):
        admin.create_token(services, user="ada")
    with pytest.raises(ValidationError, match="bootstrap admin"):
        admin.disable_user(services, "admin")


def test_tenant_and_user_commands_print_what_admin_returns(tmp_path: Path) -> None:
    runner = CliRunner()
    data = ["--data-dir", str(tmp_path / "data")]

    made = runner.invoke(main, ["tenant", "create", *data, "--init", "vision", "--json"])
    assert made.exit_code == 0, made.output
    tenant = json.loads(made.stdout)
    assert list(tenant) == ["id", "name", "createdAt", "workspaces"]
    listed = runner.invoke(main, ["tenant", "list", *data]).stdout.splitlines()
    assert listed[0].split() == ["ID", "NAME", "WORKSPACES"]
    assert listed[2].split() == [tenant["id"], "vision", "default"]

    human = runner.invoke(main, ["user", "create", *data, "bob", "--tenant", "vision"])
    assert human.exit_code == 0, human.output
    assert "  next: tracestore token create --user bob --tenant vision --data-dir" in human.stdout
    ada = json.loads(
        runner.invoke(main, ["user", "create", *data, "ada", "--tenant-admin", "--json"]).stdout
    )
    assert list(ada) == [
        "id",
        "name",
        "tenantId",
        "tenantName",
        "workspaces",
        "isTenantAdmin",
        "createdAt",
        "disabledAt",
    ]
    token = json.loads(
        runner.invoke(main, ["token", "create", *data, "--user", "ada", "--json"]).stdout
    )
    assert token["userId"] == ada["id"]

    disabled = runner.invoke(main, ["user", "disable", *data, "ada"])
    assert disabled.stdout == f"disabled ada ({ada['id']})\n"
    rows = runner.invoke(main, ["user", "list", *data]).stdout.splitlines()
    assert rows[0].split() == ["ID", "NAME", "TENANT", "WORKSPACES", "ADMIN", "STATE"]
    assert [row.split()[1:3] + row.split()[-2:] for row in rows[1:]] == [
        ["admin", "default", "yes", "active"],
        ["bob", "vision", "no", "active"],
        ["ada", "default", "yes", "disabled"],
    ]
    for words, message in (
        (["tenant", "create", *data, "vision"], "Tenant 'vision' already exists"),
        (["user", "create", *data, "bob", "--tenant", "vision"], "User 'bob' already exists"),
        (["user", "disable", *data, "nobody"], "User 'nobody' not found"),
    ):
        failed = runner.invoke(main, words)
        assert failed.exit_code == 1 and f"Error: {message}" in failed.stderr
