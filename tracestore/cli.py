"""The ``tracestore`` command: run the service, administer it, and work with tracesets.

Server commands (``serve``, ``token``, ``workspace``, ``gc``) need the ``server`` extra and
import it only when they run; the rest work with the client alone.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracestore.cli_client import COMMANDS as CLIENT_COMMANDS
from tracestore.cli_inspect import inspect_command

if TYPE_CHECKING:
    from tracestore.server.services import Services
    from tracestore.server.settings import Settings

EXIT_API_ERROR = 1
EXIT_USAGE = 2


def _server_settings(data_dir: Path | None, **overrides: Any) -> Settings:
    try:
        from tracestore.server.settings import Settings
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise click.ClickException(
            f"This command needs the server extra: pip install 'tracestore[server]' ({exc})"
        ) from None
    return Settings.load(data_dir=data_dir, **overrides)


def _open_services(data_dir: Path | None) -> Services:
    from tracestore.server.auth import bootstrap
    from tracestore.server.services import build_services

    services = build_services(_server_settings(data_dir))
    bootstrap(services.db, services.settings.data_dir, services.now())
    return services


data_dir_option = click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Data directory (default: $TRACESTORE_DATA_DIR or ./tracestore-data).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracestore")
def main() -> None:
    """tracestore: keep, find and fetch the trace files of distributed training runs."""


for _command in (*CLIENT_COMMANDS, inspect_command):
    main.add_command(_command)


@main.command()
@click.option("--host", default=None, help="Interface to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port to listen on (default 8000).")
@data_dir_option
@click.option(
    "--workers",
    type=int,
    default=1,
    show_default=True,
    help="Worker processes (share one database and blob store).",
)
def serve(host: str | None, port: int | None, data_dir: Path | None, workers: int) -> None:
    """Run the traceset service (SQLite and a local blob directory unless configured)."""
    import uvicorn

    from tracestore.server.app import create_app
    from tracestore.server.auth import ADMIN_TOKEN_FILE, bootstrap
    from tracestore.server.protocol import HTTP_PROTOCOL
    from tracestore.server.services import build_services

    settings = _server_settings(data_dir, host=host, port=port)
    # Migrate and bootstrap once here, so several workers never race to do it.
    services = build_services(settings)
    token = bootstrap(services.db, settings.data_dir, services.now())
    services.close()
    if token is not None:
        click.echo(
            f"Created the admin user. Its API token (saved in "
            f"{settings.data_dir / ADMIN_TOKEN_FILE}, shown once here):\n  {token}",
            err=True,
        )
    click.echo(
        f"tracestore listening on http://{settings.host}:{settings.port} "
        f"(data in {settings.data_dir.resolve()})",
        err=True,
    )
    if workers > 1:
        import os

        os.environ["TRACESTORE_DATA_DIR"] = str(settings.data_dir)
        os.environ["TRACESTORE_HOST"] = settings.host
        os.environ["TRACESTORE_PORT"] = str(settings.port)
        uvicorn.run(
            "tracestore.server.app:create_app",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=workers,
            log_level="info",
            http=HTTP_PROTOCOL,
        )
        return
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        http=HTTP_PROTOCOL,
    )


# --- administration on a data directory ---


@main.group()
def token() -> None:
    """Create, list and revoke API tokens (on the server's data directory)."""


@token.command("create")
@data_dir_option
@click.option("--user", "user_id", default=None, help="User id (default: the admin user).")
@click.option("--name", default="cli", show_default=True, help="A label for the token.")
@click.option(
    "--expires-in-days",
    type=click.IntRange(1, 3650),
    default=None,
    help="Expire the token after this many days.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def token_create(
    data_dir: Path | None,
    user_id: str | None,
    name: str,
    expires_in_days: int | None,
    as_json: bool,
) -> None:
    """Issue an API token; it is shown once."""
    from sqlalchemy import select

    from tracestore.server import db
    from tracestore.server.auth import issue_token

    services = _open_services(data_dir)
    now = services.now()
    expires = now + timedelta(days=expires_in_days) if expires_in_days else None
    with services.db.session() as session:
        if user_id is None:
            user_id = session.scalar(
                select(db.User.id)
                .where(db.User.is_tenant_admin)
                .order_by(db.User.created_at)
                .limit(1)
            )
            if user_id is None:
                raise click.ClickException("No admin user exists")
        issued = issue_token(session, user_id, name, now, expires)
    payload = {
        "id": issued.id,
        "token": issued.token,
        "userId": issued.user_id,
        "name": issued.name,
        "expiresAt": expires.isoformat().replace("+00:00", "Z") if expires else None,
    }
    if as_json:
        click.echo(json.dumps(payload))
    else:
        click.echo(f"{issued.token}\n(id {issued.id}, user {issued.user_id}; shown once)")


@token.command("list")
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def token_list(data_dir: Path | None, as_json: bool) -> None:
    """List API tokens (never their secret)."""
    from sqlalchemy import select

    from tracestore.server import db

    services = _open_services(data_dir)
    with services.db.session(write=False) as session:
        rows = session.scalars(select(db.ApiToken).order_by(db.ApiToken.created_at)).all()
        items = [
            {
                "id": r.id,
                "name": r.name,
                "userId": r.user_id,
                "createdAt": _ts(r.created_at),
                "expiresAt": _ts(r.expires_at),
                "revokedAt": _ts(r.revoked_at),
            }
            for r in rows
        ]
    if as_json:
        click.echo(json.dumps(items))
        return
    for item in items:
        state = "revoked" if item["revokedAt"] else "active"
        click.echo(
            f"{item['id']}  {item['name']:<20}  {item['userId']}  {state}"
            f"{'  expires ' + str(item['expiresAt']) if item['expiresAt'] else ''}"
        )


@token.command("revoke")
@data_dir_option
@click.argument("token_id")
def token_revoke(data_dir: Path | None, token_id: str) -> None:
    """Revoke an API token by its id."""
    from tracestore.errors import NotFound
    from tracestore.server.auth import revoke_token

    services = _open_services(data_dir)
    try:
        with services.db.session() as session:
            revoke_token(session, token_id, services.now())
    except NotFound as exc:
        raise click.ClickException(exc.message) from None
    click.echo(f"revoked {token_id}")


@main.group()
def workspace() -> None:
    """Create and list workspaces (on the server's data directory)."""


@workspace.command("create")
@data_dir_option
@click.argument("name")
@click.option(
    "--member",
    "members",
    multiple=True,
    help="User id to add (repeatable); the admin user is always added.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def workspace_create(
    data_dir: Path | None, name: str, members: tuple[str, ...], as_json: bool
) -> None:
    """Create a workspace in the admin's tenant."""
    from sqlalchemy import select

    from tracestore.errors import TracestoreError
    from tracestore.server import db
    from tracestore.server.auth import add_member, create_workspace

    services = _open_services(data_dir)
    try:
        with services.db.session() as session:
            admin = session.scalars(
                select(db.User).where(db.User.is_tenant_admin).order_by(db.User.created_at).limit(1)
            ).one()
            created = create_workspace(session, admin.tenant_id, name, services.now())
            session.flush()
            for user_id in (admin.id, *members):
                add_member(session, user_id, created.id)
            result = {"id": created.id, "name": created.name, "tenantId": created.tenant_id}
    except TracestoreError as exc:
        raise click.ClickException(exc.message) from None
    click.echo(json.dumps(result) if as_json else f"{result['id']}  {result['name']}")


@workspace.command("list")
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def workspace_list(data_dir: Path | None, as_json: bool) -> None:
    """List workspaces."""
    from sqlalchemy import select

    from tracestore.server import db

    services = _open_services(data_dir)
    with services.db.session(write=False) as session:
        rows = session.scalars(select(db.Workspace).order_by(db.Workspace.created_at)).all()
        items = [{"id": w.id, "name": w.name, "tenantId": w.tenant_id} for w in rows]
    if as_json:
        click.echo(json.dumps(items))
        return
    for item in items:
        click.echo(f"{item['id']}  {item['name']}")


@main.command()
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def gc(data_dir: Path | None, as_json: bool) -> None:
    """Sweep once: delete expired tracesets, fail expired uploads, purge unused bytes.

    Safe to run while servers run on the same data (they sweep on a timer too).
    """
    from tracestore.server.lifecycle import sweep

    services = _open_services(data_dir)
    try:
        report = sweep(services)
    finally:
        services.close()
    if as_json:
        click.echo(json.dumps(report.as_json()))
        return
    click.echo(
        f"expired {report.expired_tracesets} tracesets, failed {report.failed_sessions} upload "
        f"sessions, purged {report.purged_blobs} blobs ({report.purged_bytes} bytes)"
        + ("; purge deferred: an upload is completing" if report.purge_deferred else "")
    )


def _ts(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value else None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
