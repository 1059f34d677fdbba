"""The commands that run and administer a service on its data directory: ``serve``,
``token``, ``workspace``, ``gc``.

They need the ``server`` extra and import it only when they run, so the client commands
work with the client alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracestore.cli.common import json_option
from tracestore.cli.output import echo_json, timestamp, wire
from tracestore.errors import TracestoreError

if TYPE_CHECKING:
    from tracestore.server.services import Services
    from tracestore.server.settings import Settings


def _server_settings(data_dir: Path | None, **overrides: Any) -> Settings:
    try:
        from tracestore.server.settings import Settings
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise click.ClickException(
            f"This command needs the server extra: pip install 'tracestore[server]' ({exc})"
        ) from None
    return Settings.load(data_dir=data_dir, **overrides)


@contextmanager
def _services(data_dir: Path | None) -> Iterator[Services]:
    """The service's parts on ``data_dir`` (bootstrapped on first use), closed afterwards;
    a domain error becomes the command's error message."""
    from tracestore.server.auth import bootstrap
    from tracestore.server.services import build_services

    services = build_services(_server_settings(data_dir))
    try:
        bootstrap(services.db, services.settings.data_dir, services.now())
        yield services
    except TracestoreError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        services.close()


data_dir_option = click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Data directory (default: $TRACESTORE_DATA_DIR or ./tracestore-data).",
)


@click.command()
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

    from tracestore.server.accesslog import log_config
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
            log_config=log_config(),
            http=HTTP_PROTOCOL,
        )
        return
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        log_config=log_config(),
        http=HTTP_PROTOCOL,
    )


# --- administration on a data directory ---


@click.group()
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
@json_option
def token_create(
    data_dir: Path | None,
    user_id: str | None,
    name: str,
    expires_in_days: int | None,
    as_json: bool,
) -> None:
    """Issue an API token; it is shown once."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        issued = admin.create_token(
            services, user_id=user_id, name=name, expires_in_days=expires_in_days
        )
    if as_json:
        echo_json(wire(issued))
    else:
        click.echo(f"{issued.token}\n(id {issued.id}, user {issued.user_id}; shown once)")


@token.command("list")
@data_dir_option
@json_option
def token_list(data_dir: Path | None, as_json: bool) -> None:
    """List API tokens (never their secret)."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        tokens = admin.list_tokens(services)
    if as_json:
        echo_json([wire(item) for item in tokens])
        return
    for item in tokens:
        state = "revoked" if item.revoked_at else "active"
        expires = f"  expires {timestamp(item.expires_at)}" if item.expires_at else ""
        click.echo(f"{item.id}  {item.name:<20}  {item.user_id}  {state}{expires}")


@token.command("revoke")
@data_dir_option
@click.argument("token_id")
def token_revoke(data_dir: Path | None, token_id: str) -> None:
    """Revoke an API token by its id."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        admin.revoke_token(services, token_id)
    click.echo(f"revoked {token_id}")


@click.group()
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
@json_option
def workspace_create(
    data_dir: Path | None, name: str, members: tuple[str, ...], as_json: bool
) -> None:
    """Create a workspace in the admin's tenant."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        created = admin.create_workspace(services, name, members)
    if as_json:
        echo_json(wire(created))
    else:
        click.echo(f"{created.id}  {created.name}")


@workspace.command("list")
@data_dir_option
@json_option
def workspace_list(data_dir: Path | None, as_json: bool) -> None:
    """List workspaces."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        workspaces = admin.list_workspaces(services)
    if as_json:
        echo_json([wire(item) for item in workspaces])
        return
    for item in workspaces:
        click.echo(f"{item.id}  {item.name}")


@click.command()
@data_dir_option
@json_option
def gc(data_dir: Path | None, as_json: bool) -> None:
    """Sweep once: delete expired tracesets, fail expired uploads, purge unused bytes.

    Safe to run while servers run on the same data (they sweep on a timer too).
    """
    from tracestore.server.lifecycle import sweep

    with _services(data_dir) as services:
        report = sweep(services)
    if as_json:
        echo_json(report.as_json())
        return
    click.echo(
        f"expired {report.expired_tracesets} tracesets, failed {report.failed_sessions} upload "
        f"sessions, purged {report.purged_blobs} blobs ({report.purged_bytes} bytes)"
        + ("; purge deferred: an upload is completing" if report.purge_deferred else "")
    )


COMMANDS: tuple[click.Command, ...] = (serve, token, workspace, gc)
