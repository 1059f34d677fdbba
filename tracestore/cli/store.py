"""What the commands that work on a service's data directory share: its settings, its
services (on an existing store only, unless ``--init``) and their options.

They need the ``server`` extra and import it only when they run, so the client commands
work with the client alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracestore.errors import TracestoreError

if TYPE_CHECKING:
    from tracestore.server.services import Services
    from tracestore.server.settings import Settings


def server_settings(data_dir: Path | None, **overrides: Any) -> Settings:
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
def store_services(data_dir: Path | None, init: bool = False) -> Iterator[Services]:
    """The service's parts on ``data_dir`` (bootstrapped on first use, and made only when
    ``init``: an admin command pointed at the wrong place must not make a new store and a
    new admin), closed afterwards; a domain error becomes the command's error message."""
    from tracestore.server.auth import bootstrap
    from tracestore.server.services import build_services

    settings = server_settings(data_dir)
    if not init:
        require_store(settings)
    services = built_services(settings, build_services)
    try:
        bootstrap(services.db, services.settings.data_dir, services.now())
        yield services
    except TracestoreError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        services.close()


def require_store(settings: Settings) -> None:
    """Refuse, naming the database and where its URL came from, unless it holds a store."""
    from tracestore.server.db.database import schema_exists, shown_url
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


def built_services(settings: Settings, build: Callable[[Settings], Services]) -> Services:
    """``build(settings)``, a database that cannot be reached or migrated one line."""
    from sqlalchemy.exc import SQLAlchemyError

    from tracestore.server.db.database import shown_url
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
