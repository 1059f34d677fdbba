"""The commands that run and administer a service on its data directory: ``serve``,
``tenant``, ``user``, ``token``, ``workspace``, ``gc``.

They need the ``server`` extra and import it only when they run, so the client commands
work with the client alone.
"""

from __future__ import annotations

import shlex
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracestore.cli.common import json_option
from tracestore.cli.local_service import forget_service, local_url, record_service
from tracestore.cli.output import echo_json, table, timestamp, wire
from tracestore.errors import TracestoreError

if TYPE_CHECKING:
    from tracestore import schemas
    from tracestore.server.services import Services
    from tracestore.server.settings import Settings


def _server_settings(data_dir: Path | None, **overrides: Any) -> Settings:
    """The server's settings, a bad one the command's one-line error and an unknown name
    a warning on stderr."""
    try:
        from tracestore.server.settings import Settings, SettingsError
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise click.ClickException(
            f"This command needs the server extra: pip install 'tracestore[server]' ({exc})"
        ) from None
    try:
        settings = Settings.load(data_dir=data_dir, **overrides)
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    for warning in settings.warnings:
        click.echo(f"Warning: {warning}", err=True)
    return settings


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
    listener = _listen(settings.host, settings.port)
    port = int(listener.getsockname()[1])
    settings = settings.model_copy(update={"port": port})  # --port 0: the one bound
    url = local_url(settings.host, port)
    click.echo(
        f"tracestore listening on {_netloc(settings.host, port)}, here {url} "
        f"(data in {settings.data_dir.resolve()})",
        err=True,
    )
    click.echo(_handed_out_urls(settings), err=True)
    # Forwarded headers are the app's to judge (TRACESTORE_TRUSTED_PROXIES), not uvicorn's.
    options: dict[str, Any] = {
        "log_level": "info",
        "log_config": log_config(),  # the access log without signatures
        "http": HTTP_PROTOCOL,
        "proxy_headers": False,
    }
    record = record_service(settings.data_dir, url)
    # uvicorn re-raises the signal it stopped on; as an exception, the record is removed.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        if workers > 1:
            import os

            from uvicorn.supervisors import Multiprocess

            os.environ["TRACESTORE_DATA_DIR"] = str(settings.data_dir)
            os.environ["TRACESTORE_HOST"] = settings.host
            os.environ["TRACESTORE_PORT"] = str(port)
            config = uvicorn.Config(
                "tracestore.server.app:create_app", factory=True, workers=workers, **options
            )
            Multiprocess(config, sockets=[listener]).run()
        else:
            uvicorn.Server(uvicorn.Config(create_app(settings), **options)).run([listener])
    except KeyboardInterrupt:
        pass
    finally:
        forget_service(record)
        listener.close()


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _listen(host: str, port: int) -> socket.socket:
    """The bound listening socket, before anything is recorded: a port in use is one line."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(
            f"Cannot listen on {_netloc(host, port)}: {exc.strerror or exc}; "
            "pick another --port, or stop what listens there"
        ) from None
    sock.set_inheritable(True)  # the worker processes serve it too
    return sock


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _handed_out_urls(settings: Settings) -> str:
    """The startup line that says which URLs clients will be handed (part, download,
    archive), so a wrong base is seen before anyone uploads."""
    import ipaddress

    if settings.public_url:
        return f"Presigned URLs are handed out under {settings.public_url} (TRACESTORE_PUBLIC_URL)"
    try:
        wildcard = ipaddress.ip_address(settings.host).is_unspecified
    except ValueError:
        wildcard = False
    example = socket.gethostname() if wildcard else settings.host
    proxies = ", ".join(str(n) for n in settings.trusted_proxies)
    trust = (
        f"; X-Forwarded-Proto/-Host believed from {proxies}"
        if proxies
        else "; no proxy trusted (TRACESTORE_TRUSTED_PROXIES)"
    )
    return (
        "Presigned URLs follow each request's scheme and Host, e.g. "
        f"http://{_netloc(example, settings.port)}/blobs/... for a client that used that address"
        f"{trust}. Set TRACESTORE_PUBLIC_URL to fix one base."
    )


# --- administration on a data directory ---


@click.group()
def token() -> None:
    """Create, list and revoke API tokens (on the server's data directory)."""


tenant_option = click.option(
    "--tenant", default=None, help="Tenant name or id (default: the admin's tenant)."
)


@token.command("create")
@data_dir_option
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
    user: str | None,
    tenant: str | None,
    name: str,
    expires_in_days: int | None,
    as_json: bool,
) -> None:
    """Issue an API token for a user (default: the admin); it is shown once."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        issued = admin.create_token(
            services, user=user, tenant=tenant, name=name, expires_in_days=expires_in_days
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
    help="User name or id to add (repeatable); in the admin's tenant the admin is added too.",
)
@tenant_option
@json_option
def workspace_create(
    data_dir: Path | None, name: str, members: tuple[str, ...], tenant: str | None, as_json: bool
) -> None:
    """Create a workspace (in the admin's tenant unless --tenant)."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        created = admin.create_workspace(services, name, members, tenant=tenant)
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


@click.group()
def tenant() -> None:
    """Create and list tenants (on the server's data directory)."""


@tenant.command("create")
@data_dir_option
@click.argument("name")
@json_option
def tenant_create(data_dir: Path | None, name: str, as_json: bool) -> None:
    """Create a tenant, with a workspace named ``default`` for its users."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        created = admin.create_tenant(services, name)
    if as_json:
        echo_json(wire(created))
    else:
        click.echo(f"{created.id}  {created.name}  (workspace {created.workspaces[0].name})")
        words = ["tracestore", "user", "create", "NAME", "--tenant", created.name]
        click.echo(f"  next: {_command_line(words, data_dir)}")


@tenant.command("list")
@data_dir_option
@json_option
def tenant_list(data_dir: Path | None, as_json: bool) -> None:
    """List tenants and their workspaces."""
    from tracestore.server import admin

    with _services(data_dir) as services:
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
@data_dir_option
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
    name: str,
    tenant: str | None,
    workspaces: tuple[str, ...],
    tenant_admin: bool,
    as_json: bool,
) -> None:
    """Create a user; then `tracestore token create --user NAME` gives them a token."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        created = admin.create_user(
            services, name, tenant=tenant, workspaces=workspaces, tenant_admin=tenant_admin
        )
    if as_json:
        echo_json(wire(created))
        return
    click.echo(_user_line(created))
    words = ["tracestore", "token", "create", "--user", created.name]
    if tenant is not None:
        words += ["--tenant", tenant]
    click.echo(f"  next: {_command_line(words, data_dir)}")


@user.command("list")
@data_dir_option
@tenant_option
@json_option
def user_list(data_dir: Path | None, tenant: str | None, as_json: bool) -> None:
    """List users (of every tenant unless --tenant)."""
    from tracestore.server import admin

    with _services(data_dir) as services:
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
@data_dir_option
@click.argument("name")
@click.option("--tenant", default=None, help="The user's tenant, when its name is not unique.")
@json_option
def user_disable(data_dir: Path | None, name: str, tenant: str | None, as_json: bool) -> None:
    """Disable a user (name or id): their tokens are refused from the next request on."""
    from tracestore.server import admin

    with _services(data_dir) as services:
        disabled = admin.disable_user(services, name, tenant=tenant)
    if as_json:
        echo_json(wire(disabled))
    else:
        click.echo(f"disabled {disabled.name} ({disabled.id})")


def _command_line(words: list[str], data_dir: Path | None) -> str:
    """A next-step command, on the same data directory as the one just run."""
    if data_dir is not None:
        words = [*words, "--data-dir", str(data_dir)]
    return shlex.join(words)


def _user_line(item: schemas.User) -> str:
    admin_mark = ", tenant admin" if item.is_tenant_admin else ""
    workspaces = ", ".join(item.workspaces) or "no workspace"
    return f"{item.id}  {item.name}  (tenant {item.tenant_name}; {workspaces}{admin_mark})"


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


COMMANDS: tuple[click.Command, ...] = (serve, tenant, user, token, workspace, gc)
