"""The commands that run and administer a service on its data directory: ``serve``,
``migrate``, ``tenant``, ``user``, ``token``, ``workspace``, ``gc``, ``signing-key``. The
administration commands work on an existing store only, unless given ``--init``.

They need the ``server`` extra and import it only when they run, so the client commands
work with the client alone.
"""

from __future__ import annotations

import shlex
import signal
import socket
from collections.abc import Callable, Iterator
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
def _services(data_dir: Path | None, init: bool = False) -> Iterator[Services]:
    """The service's parts on ``data_dir`` (bootstrapped on first use, and made only when
    ``init``: an admin command pointed at the wrong place must not make a new store and a
    new admin), closed afterwards; a domain error becomes the command's error message."""
    from tracestore.server.auth import bootstrap
    from tracestore.server.services import build_services

    settings = _server_settings(data_dir)
    if not init:
        _require_store(settings)
    services = _built(settings, build_services)
    try:
        bootstrap(services.db, services.settings.data_dir, services.now())
        yield services
    except TracestoreError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        services.close()


def _require_store(settings: Settings) -> None:
    """Refuse, naming the database and where its URL came from, unless it holds a store."""
    from tracestore.server.db import schema_exists, shown_url
    from tracestore.server.services import failure_reason

    url = settings.resolved_database_url
    try:
        found = schema_exists(url)
    except Exception as exc:
        raise click.ClickException(
            f"Cannot reach the database {shown_url(url)} (TRACESTORE_DATABASE_URL): "
            f"{failure_reason(exc)}"
        ) from None
    if not found:
        source = (
            "TRACESTORE_DATABASE_URL"
            if settings.database_url
            else f"the data directory {settings.data_dir.resolve()}"
        )
        raise click.ClickException(
            f"No tracestore store at {shown_url(url)} (from {source}); point --data-dir "
            "or TRACESTORE_DATABASE_URL at the service's, or pass --init to create a new one"
        )


def _built(settings: Settings, build: Callable[[Settings], Services]) -> Services:
    """``build(settings)``, a database that cannot be reached or migrated one line."""
    from sqlalchemy.exc import SQLAlchemyError

    from tracestore.server.db import shown_url
    from tracestore.server.services import failure_reason

    try:
        return build(settings)
    except ValueError as exc:  # a blob URL of no known scheme
        raise click.ClickException(str(exc)) from None
    except SQLAlchemyError as exc:
        raise click.ClickException(
            f"Cannot use the database {shown_url(settings.resolved_database_url)} "
            f"(TRACESTORE_DATABASE_URL): {failure_reason(exc)}"
        ) from None


data_dir_option = click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Data directory (default: $TRACESTORE_DATA_DIR or ./tracestore-data).",
)
init_option = click.option(
    "--init",
    is_flag=True,
    help="Create the store (database and admin) when there is none yet.",
)


def store_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--data-dir`` and ``--init``, for the commands that administer an existing store."""
    return data_dir_option(init_option(command))


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
    # Migrate and bootstrap once here (one process at a time, under the database's lock).
    services = _built(settings, build_services)
    failures = services.failures(write=True)
    if failures:
        services.close()
        raise click.ClickException("Cannot start: " + "; ".join(failures))
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


@click.command()
@data_dir_option
def migrate(data_dir: Path | None) -> None:
    """Bring the database to the newest schema (creating it if new); safe to repeat and to
    run while replicas start. Run it first when deploying a new version."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    from tracestore.server.blobs import private_directory
    from tracestore.server.db import Database, shown_url
    from tracestore.server.services import failure_reason

    settings = _server_settings(data_dir)
    url = settings.resolved_database_url
    if not settings.database_url:
        private_directory(settings.data_dir)
    database = Database(url)
    try:
        database.migrate()
        with database.session(write=False) as session:
            revision = session.scalar(text("SELECT version_num FROM alembic_version"))
    except SQLAlchemyError as exc:
        raise click.ClickException(
            f"Cannot migrate the database {shown_url(url)} (TRACESTORE_DATABASE_URL): "
            f"{failure_reason(exc)}"
        ) from None
    finally:
        database.dispose()
    click.echo(f"database {shown_url(url)} is at schema revision {revision}")


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

    with _services(data_dir, init) as services:
        issued = admin.create_token(
            services, user=user, tenant=tenant, name=name, expires_in_days=expires_in_days
        )
    if as_json:
        echo_json(wire(issued))
    else:
        click.echo(f"{issued.token}\n(id {issued.id}, user {issued.user_id}; shown once)")


@token.command("list")
@store_options
@json_option
def token_list(data_dir: Path | None, init: bool, as_json: bool) -> None:
    """List API tokens (never their secret)."""
    from tracestore.server import admin

    with _services(data_dir, init) as services:
        tokens = admin.list_tokens(services)
    if as_json:
        echo_json([wire(item) for item in tokens])
        return
    for item in tokens:
        state = "revoked" if item.revoked_at else "active"
        expires = f"  expires {timestamp(item.expires_at)}" if item.expires_at else ""
        click.echo(f"{item.id}  {item.name:<20}  {item.user_id}  {state}{expires}")


@token.command("revoke")
@store_options
@click.argument("token_id")
def token_revoke(data_dir: Path | None, init: bool, token_id: str) -> None:
    """Revoke an API token by its id."""
    from tracestore.server import admin

    with _services(data_dir, init) as services:
        admin.revoke_token(services, token_id)
    click.echo(f"revoked {token_id}")


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

    with _services(data_dir, init) as services:
        created = admin.create_workspace(services, name, members, tenant=tenant)
    if as_json:
        echo_json(wire(created))
    else:
        click.echo(f"{created.id}  {created.name}")


@workspace.command("list")
@store_options
@json_option
def workspace_list(data_dir: Path | None, init: bool, as_json: bool) -> None:
    """List workspaces."""
    from tracestore.server import admin

    with _services(data_dir, init) as services:
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
@store_options
@click.argument("name")
@json_option
def tenant_create(data_dir: Path | None, init: bool, name: str, as_json: bool) -> None:
    """Create a tenant, with a workspace named ``default`` for its users."""
    from tracestore.server import admin

    with _services(data_dir, init) as services:
        created = admin.create_tenant(services, name)
    if as_json:
        echo_json(wire(created))
    else:
        click.echo(f"{created.id}  {created.name}  (workspace {created.workspaces[0].name})")
        words = ["tracestore", "user", "create", "NAME", "--tenant", created.name]
        click.echo(f"  next: {_command_line(words, data_dir)}")


@tenant.command("list")
@store_options
@json_option
def tenant_list(data_dir: Path | None, init: bool, as_json: bool) -> None:
    """List tenants and their workspaces."""
    from tracestore.server import admin

    with _services(data_dir, init) as services:
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

    with _services(data_dir, init) as services:
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
@store_options
@tenant_option
@json_option
def user_list(data_dir: Path | None, init: bool, tenant: str | None, as_json: bool) -> None:
    """List users (of every tenant unless --tenant)."""
    from tracestore.server import admin

    with _services(data_dir, init) as services:
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

    with _services(data_dir, init) as services:
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
@store_options
@json_option
def gc(data_dir: Path | None, init: bool, as_json: bool) -> None:
    """Sweep once: delete expired tracesets, fail expired uploads, purge unused bytes.

    Safe to run while servers run on the same data (they sweep on a timer too).
    """
    from tracestore.server.lifecycle import sweep

    with _services(data_dir, init) as services:
        report = sweep(services)
    if as_json:
        echo_json(report.as_json())
        return
    click.echo(
        f"expired {report.expired_tracesets} tracesets, failed {report.failed_sessions} upload "
        f"sessions, purged {report.purged_blobs} blobs ({report.purged_bytes} bytes)"
        + ("; purge deferred: an upload is completing" if report.purge_deferred else "")
    )


@click.group("signing-key")
def signing_key() -> None:
    """Rotate the key that signs presigned URLs (shared by every process in the database)."""


@signing_key.command("rotate")
@store_options
def signing_key_rotate(data_dir: Path | None, init: bool) -> None:
    """Make a new signing key; URLs signed with the old one stay good until they expire."""
    from tracestore.server.presigned import KEY_REFRESH, rotate_signing_key

    with _services(data_dir, init) as services:
        if services.settings.signing_key:
            raise click.ClickException(
                "TRACESTORE_SIGNING_KEY is set: the key is that setting's; change it instead"
            )
        lifetime = services.settings.url_lifetime + KEY_REFRESH
        key_id = rotate_signing_key(services.db, services.now(), lifetime)
    click.echo(
        f"signing key {key_id} now signs; the previous one verifies for another {lifetime} "
        f"(every process picks the new one up within {KEY_REFRESH})"
    )


COMMANDS: tuple[click.Command, ...] = (
    serve,
    migrate,
    tenant,
    user,
    token,
    workspace,
    gc,
    signing_key,
)
