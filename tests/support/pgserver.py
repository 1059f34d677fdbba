"""A throwaway PostgreSQL 15 cluster in a temporary directory, for tests and benchmarks.

``PostgresServer`` runs ``initdb`` and ``pg_ctl`` from the installed PostgreSQL 15 (as the
``postgres`` user when running as root: PostgreSQL refuses to run as root), listens on a
free TCP port of 127.0.0.1 and on a unix socket inside its directory, with trust
authentication, and removes everything on ``stop()``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from tests.support.ports import free_port

PG_BIN = Path(os.environ.get("TRACESTORE_PG_BIN", "/usr/lib/postgresql/15/bin"))


class PostgresUnavailable(RuntimeError):
    """The throwaway PostgreSQL cluster could not be started."""


class PostgresServer:
    """Start with ``start()`` (or ``with``); ``url`` is a SQLAlchemy psycopg URL."""

    def __init__(self, *, settings: dict[str, str] | None = None) -> None:
        self.settings = settings or {}
        self.root: Path | None = None
        self.port = 0
        self._as_postgres = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            shown = " ".join(command)
            raise PostgresUnavailable(
                f"{shown} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result

    def start(self) -> PostgresServer:
        if not (PG_BIN / "initdb").exists():
            raise PostgresUnavailable(f"PostgreSQL binaries not found in {PG_BIN}")
        self.root = Path(tempfile.mkdtemp(prefix="tracestore-pg-"))
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        data = self.root / "data"
        try:
            self._run(
                str(PG_BIN / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            )
            options = {
                "listen_addresses": "'127.0.0.1'",
                "unix_socket_directories": f"'{self.root}'",
                "fsync": "off",
                "synchronous_commit": "off",
                "full_page_writes": "off",
                "max_connections": "200",
                "shared_buffers": "128MB",
                **self.settings,
            }
            with (data / "postgresql.conf").open("a") as conf:
                for key, value in options.items():
                    conf.write(f"{key} = {value}\n")
            for _attempt in range(5):
                self.port = free_port()
                try:
                    self._run(
                        str(PG_BIN / "pg_ctl"),
                        "-D",
                        str(data),
                        "-o",
                        f"-p {self.port}",
                        "-l",
                        str(self.root / "server.log"),
                        "-w",
                        "-t",
                        "60",
                        "start",
                    )
                    break
                except PostgresUnavailable:
                    log = self.root / "server.log"
                    if "could not bind" not in (log.read_text() if log.exists() else ""):
                        raise
            else:
                raise PostgresUnavailable("no free port for PostgreSQL after 5 attempts")
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.dsn(), connect_timeout=5) as connection:
                    connection.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def dsn(self, database: str = "postgres") -> str:
        """A libpq connection string (for psycopg directly)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.root is None:
            return
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(PostgresUnavailable):
                self._run(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
