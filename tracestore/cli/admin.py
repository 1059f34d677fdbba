"""The administration commands on a service's store: ``tenant``, ``user``, ``token``,
``workspace``. They work on an existing store only, unless given ``--init``."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracestore.cli.common import json_option
from tracestore.cli.output import echo_json, echo_shown, table, timestamp, wire
from tracestore.cli.store import store_options, store_services

if TYPE_CHECKING:
    from tracestore import schemas


@click.group()
def token() -> None:
    """Create, list and revoke API tokens (on the server's data directory)."""


tenant_option = click.option(
    "--tenant", default=None, help="Tenant name or id (default: the admin's tenant)."
)


@token.command("create")
@store_options
@click.option("--user", default=None, help="User name or id (default: the admin user).")
@click.option("--tenant", default=None, help="The user's tenant, when its name is not unique.")
@click.option("--name", default="cli", show_default=True, help="A label for the token.")
@click.option(
    "--expires-in-days",
    type=click.IntRange(1, 3650),
    default=None,
    help="Expire the token after this many days.",
)
@json_option
def token_create(
    data_dir: Path | None,
    init: bool,
    user: str | None,
    tenant: str | None,
    name: str,
    expires_in_days: int | None,
    as_json: bool,
) -> None:
    """Issue an API token for a user (default: the admin); it is shown once."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        issued = admin.create_token(
            services, user=user, tenant=tenant, name=name, expires_in_days=expires_in_days
        )
    if as_json:
        echo_json(wire(issued))
    else:
        click.echo(issued.token)
        echo_shown(f"(id {issued.id}, user {issued.user_id}; shown once)")


@token.command("list")
@store_options
@json_option
def token_list(data_dir: Path | None, init: bool, as_json: bool) -> None:
    """List API tokens (never their secret)."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        tokens = admin.list_tokens(services)
    if as_json:
        echo_json([wire(item) for item in tokens])
        return
    for item in tokens:
        state = "revoked" if item.revoked_at else "active"
        expires = f"  expires {timestamp(item.expires_at)}" if item.expires_at else ""
        echo_shown(f"{item.id}  {item.name:<20}  {item.user_id}  {state}{expires}")


@token.command("revoke")
@store_options
@click.argument("token_id")
def token_revoke(data_dir: Path | None, init: bool, token_id: str) -> None:
    """Revoke an API token by its id."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        admin.revoke_token(services, token_id)
    echo_shown(f"revoked {token_id}")


@click.group()
def workspace() -> None:
    """Create and list workspaces (on the server's data directory)."""


@workspace.command("create")
@store_options
@click.argument("name")
@click.option(
    "--member",
    "members",
    multiple=True,
    help="User name or id to add (repeatable); in the admin's tenant the admin is added too.",
)
@tenant_option
@json_option
def workspace_create(
    data_dir: Path | None,
    init: bool,
    name: str,
    members: tuple[str, ...],
    tenant: str | None,
    as_json: bool,
) -> None:
    """Create a workspace (in the admin's tenant unless --tenant)."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        created = admin.create_workspace(services, name, members, tenant=tenant)
    if as_json:
        echo_json(wire(created))
    else:
        echo_shown(f"{created.id}  {created.name}")


@workspace.command("list")
@store_options
@json_option
def workspace_list(data_dir: Path | None, init: bool, as_json: bool) -> None:
    """List workspaces."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        workspaces = admin.list_workspaces(services)
    if as_json:
        echo_json([wire(item) for item in workspaces])
        return
    for item in workspaces:
        echo_shown(f"{item.id}  {item.name}")


@click.group()
def tenant() -> None:
    """Create and list tenants (on the server's data directory)."""


@tenant.command("create")
@store_options
@click.argument("name")
@json_option
def tenant_create(data_dir: Path | None, init: bool, name: str, as_json: bool) -> None:
    """Create a tenant, with a workspace named ``default`` for its users."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        created = admin.create_tenant(services, name)
    if as_json:
        echo_json(wire(created))
    else:
        echo_shown(f"{created.id}  {created.name}  (workspace {created.workspaces[0].name})")
        words = ["tracestore", "user", "create", "NAME", "--tenant", created.name]
        click.echo(f"  next: {_command_line(words, data_dir)}")


@tenant.command("list")
@store_options
@json_option
def tenant_list(data_dir: Path | None, init: bool, as_json: bool) -> None:
    """List tenants and their workspaces."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        tenants = admin.list_tenants(services)
    if as_json:
        echo_json([wire(item) for item in tenants])
        return
    rows = [[t.id, t.name, ", ".join(w.name for w in t.workspaces) or "-"] for t in tenants]
    click.echo(table(["ID", "NAME", "WORKSPACES"], rows))


@click.group()
def user() -> None:
    """Create, list and disable users: give a colleague their own access."""


@user.command("create")
@store_options
@click.argument("name")
@tenant_option
@click.option(
    "--workspace",
    "workspaces",
    multiple=True,
    help="Workspace name or id to join (repeatable; the first is the default; "
    "default: the tenant's first workspace).",
)
@click.option(
    "--tenant-admin",
    is_flag=True,
    help="Make the user an admin of its tenant (may promote to public).",
)
@json_option
def user_create(
    data_dir: Path | None,
    init: bool,
    name: str,
    tenant: str | None,
    workspaces: tuple[str, ...],
    tenant_admin: bool,
    as_json: bool,
) -> None:
    """Create a user; then `tracestore token create --user NAME` gives them a token."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        created = admin.create_user(
            services, name, tenant=tenant, workspaces=workspaces, tenant_admin=tenant_admin
        )
    if as_json:
        echo_json(wire(created))
        return
    echo_shown(_user_line(created))
    words = ["tracestore", "token", "create", "--user", created.name]
    if tenant is not None:
        words += ["--tenant", tenant]
    click.echo(f"  next: {_command_line(words, data_dir)}")


@user.command("list")
@store_options
@tenant_option
@json_option
def user_list(data_dir: Path | None, init: bool, tenant: str | None, as_json: bool) -> None:
    """List users (of every tenant unless --tenant)."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        users = admin.list_users(services, tenant=tenant)
    if as_json:
        echo_json([wire(item) for item in users])
        return
    rows = [
        [
            u.id,
            u.name,
            u.tenant_name,
            ", ".join(u.workspaces) or "-",
            "yes" if u.is_tenant_admin else "no",
            "disabled" if u.disabled_at else "active",
        ]
        for u in users
    ]
    click.echo(table(["ID", "NAME", "TENANT", "WORKSPACES", "ADMIN", "STATE"], rows))


@user.command("disable")
@store_options
@click.argument("name")
@click.option("--tenant", default=None, help="The user's tenant, when its name is not unique.")
@json_option
def user_disable(
    data_dir: Path | None, init: bool, name: str, tenant: str | None, as_json: bool
) -> None:
    """Disable a user (name or id): their tokens are refused from the next request on."""
    from tracestore.server import admin

    with store_services(data_dir, init) as services:
        disabled = admin.disable_user(services, name, tenant=tenant)
    if as_json:
        echo_json(wire(disabled))
    else:
        echo_shown(f"disabled {disabled.name} ({disabled.id})")


def _command_line(words: list[str], data_dir: Path | None) -> str:
    """A next-step command, on the same data directory as the one just run."""
    if data_dir is not None:
        words = [*words, "--data-dir", str(data_dir)]
    return shlex.join(words)


def _user_line(item: schemas.User) -> str:
    admin_mark = ", tenant admin" if item.is_tenant_admin else ""
    workspaces = ", ".join(item.workspaces) or "no workspace"
    return f"{item.id}  {item.name}  (tenant {item.tenant_name}; {workspaces}{admin_mark})"


COMMANDS: tuple[click.Command, ...] = (tenant, user, token, workspace)
