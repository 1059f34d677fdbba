"""The admin use cases (``server/admin.py``) and the ``token``/``workspace`` commands that
render them."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from tests.conftest import FakeClock
from tests.tenancy import person
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
        admin.create_token(services, user_id="nobody")
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

    created = runner.invoke(main, ["token", "create", *data, "--expires-in-days", "3", "--json"])
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
