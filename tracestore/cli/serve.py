"""The commands that run a service: ``serve`` (the API, with a job worker unless
``--no-worker``), ``worker`` (jobs only) and ``migrate``."""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracestore.cli.local_service import forget_service, local_url, record_service
from tracestore.cli.store import built_services, data_dir_option, server_settings

if TYPE_CHECKING:
    from tracestore.server.settings import Settings


@click.command()
@click.option("--host", default=None, help="Interface to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port to listen on (default 8000).")
@data_dir_option
@click.option(
    "--workers",
    type=int,
    default=1,
    show_default=True,
    help="Serving processes (share one database and blob store).",
)
@click.option(
    "--no-worker",
    is_flag=True,
    help="Run no background jobs here (an API-only replica; `tracestore worker` runs them).",
)
def serve(
    host: str | None, port: int | None, data_dir: Path | None, workers: int, no_worker: bool
) -> None:
    """Run the traceset service (SQLite and a local blob directory unless configured), with
    a worker for its background jobs in each serving process unless --no-worker."""
    import uvicorn

    from tracestore.server.app import create_app
    from tracestore.server.auth import bootstrap
    from tracestore.server.services import build_services
    from tracestore.server.serving.access_log import log_config
    from tracestore.server.serving.body_protocol import HTTP_PROTOCOL
    from tracestore.server.serving.connections import (
        ConnectionLimits,
        ServeConfig,
        connection_cap,
        raise_open_file_limit,
    )
    from tracestore.server.web import blocked_part_origin

    settings = server_settings(
        data_dir, host=host, port=port, in_process_worker=False if no_worker else None
    )
    # Migrate and bootstrap once here (one process at a time, under the database's lock).
    services = built_services(settings, build_services)
    failures = services.failures(write=True)
    if failures:
        services.close()
        raise click.ClickException("Cannot start: " + "; ".join(failures))
    token_file = bootstrap(services.db, settings.data_dir, services.now())
    part_origin = services.part_origin
    services.close()
    if token_file is not None:
        click.echo(
            f"Created the admin user. Its API token is in {token_file.resolve()} (mode 0600; "
            "`tracestore` commands on this machine read it from there)",
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
    click.echo(_handed_out_urls(settings, part_origin), err=True)
    blocked = blocked_part_origin(settings, part_origin)
    if blocked:
        click.echo(blocked, err=True)
    # Forwarded headers are the app's to judge (TRACESTORE_TRUSTED_PROXIES), not uvicorn's.
    options: dict[str, Any] = {
        "log_level": "info",
        "log_config": log_config(),  # the access log without signatures
        "http": HTTP_PROTOCOL,
        # asyncio's own loop, not uvloop (uvicorn's pick when installed): saturated, uvloop
        # left some connections unanswered for 1-2 s (p99 1.3 s and wrk timeouts at 64
        # connections, for a bare Starlette route as for ours; asyncio: p99 77 ms, the same
        # throughput). The byte paths run on threads and sendfile, alike on both.
        "loop": "asyncio",
        # Stopping, uvicorn waits for every open connection; one that never ends (a client
        # that stopped reading a download) held the process up for good.
        "timeout_graceful_shutdown": settings.shutdown_grace.total_seconds(),
        "proxy_headers": False,
    }
    # Deadlines for connections waiting for a request, and a cap on them within the
    # descriptors this process may open (server/serving/connections.py).
    open_files = raise_open_file_limit()
    if settings.max_connections and settings.max_connections > connection_cap(open_files):
        click.echo(
            f"Warning: TRACESTORE_MAX_CONNECTIONS={settings.max_connections} is more than "
            f"{open_files} open files allow ({connection_cap(open_files)}); past that, "
            "connections are refused by the system, not closed by the service",
            err=True,
        )
    limits = ConnectionLimits(
        header_timeout=settings.header_timeout.total_seconds(),
        idle_timeout=settings.idle_timeout.total_seconds(),
        send_timeout=settings.send_timeout.total_seconds(),
        max_connections=settings.max_connections or connection_cap(open_files),
    )
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
            os.environ["TRACESTORE_IN_PROCESS_WORKER"] = str(settings.in_process_worker)
            config = ServeConfig(
                "tracestore.server.app:create_app",
                connections=limits,
                factory=True,
                workers=workers,
                **options,
            )
            Multiprocess(config, sockets=[listener]).run()
        else:
            config = ServeConfig(create_app(settings), connections=limits, **options)
            uvicorn.Server(config).run([listener])
    except KeyboardInterrupt:
        pass
    finally:
        forget_service(record)
        listener.close()


@click.command()
@data_dir_option
def worker(data_dir: Path | None) -> None:
    """Run the service's background jobs (inspection of large tracesets, the sweeper) from
    its database until stopped; start as many as you like, on any host with the settings.
    SIGTERM or Ctrl-C hands a job still running back for another worker."""
    import logging
    import threading

    from tracestore.server.db.database import shown_url
    from tracestore.server.services import build_services
    from tracestore.server.worker import Worker

    settings = server_settings(data_dir)
    services = built_services(settings, build_services)
    failures = services.failures(write=True)
    if failures:
        services.close()
        raise click.ClickException("Cannot start: " + "; ".join(failures))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    runner = Worker(services)
    stopping = threading.Event()
    # The handler only flags: the jobs run on the worker's thread, stopped from here.
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stopping.set())
    runner.start()
    click.echo(
        f"tracestore worker {runner.owner} running jobs from "
        f"{shown_url(settings.resolved_database_url)} (lease {settings.job_lease})",
        err=True,
    )
    try:
        stopping.wait()
    finally:
        runner.stop()
        services.close()
    click.echo(f"tracestore worker {runner.owner} stopped", err=True)


@click.command()
@data_dir_option
def migrate(data_dir: Path | None) -> None:
    """Bring the database to the newest schema (creating it if new); safe to repeat and to
    run while replicas start. Run it first when deploying a new version."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    from tracestore.server.db.database import Database, shown_url
    from tracestore.server.services import failure_reason
    from tracestore.server.storage.blobs import private_directory

    settings = server_settings(data_dir)
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
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and
    # without it an answer's headers and body wait on the peer's delayed ACK (40 ms each).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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


def _handed_out_urls(settings: Settings, part_origin: str | None) -> str:
    """The startup lines that say which URLs clients will be handed (part, download,
    archive), so a wrong base is seen before anyone uploads: on S3 the bucket's (and what a
    browser upload needs of it), the archive's the service's own."""
    import ipaddress

    lines = []
    ours, path = "Presigned URLs", "/blobs/..."
    if part_origin is not None:
        lines.append(
            f"Part and file URLs are the bucket's, at {part_origin} (TRACESTORE_BLOB_URL): "
            "for uploads from the web page, its CORS must allow PUT from the page's origin "
            "and expose ETag (docs/deploy.md)"
        )
        ours, path = "Archive URLs", "/blobs/archive/..."
    if settings.public_url:
        lines.append(f"{ours} are handed out under {settings.public_url} (TRACESTORE_PUBLIC_URL)")
        return "\n".join(lines)
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
    lines.append(
        f"{ours} follow each request's scheme and Host, e.g. "
        f"http://{_netloc(example, settings.port)}{path} for a client that used that address"
        f"{trust}. Set TRACESTORE_PUBLIC_URL to fix one base."
    )
    return "\n".join(lines)


COMMANDS: tuple[click.Command, ...] = (serve, worker, migrate)
