"""`tracestore serve` processes for tests, on PostgreSQL and S3 (moto): the module-scoped
``postgres`` and ``s3`` fixtures, empty databases on that server, replicas started at once with
their own data directory and log, waited on until ready and stopped, and the one line a process
that must not start exits with."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import psycopg
import pytest

from tests.support.pgserver import PostgresServer
from tests.support.ports import free_port
from tests.support.processes import stop_process
from tests.support.s3server import AWS_ENV, MotoServer
from tracestore.server.db import migrations

MIB = 1024 * 1024
PART = 5 * MIB
REPLICAS = 3


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A PostgreSQL server URL (the session's when the PostgreSQL pass runs, else one of our
    own): each test makes its own empty database on it."""
    shared = os.environ.get("TRACESTORE_TEST_DATABASE_URL")
    if shared:
        yield shared
        return
    with PostgresServer() as server:
        yield server.url


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


def fresh_database(server_url: str) -> str:
    """An empty database (no schema at all) on the server; its URL."""
    name = "r_" + os.urandom(6).hex()
    admin = server_url.rpartition("/")[0] + "/postgres"
    with psycopg.connect(admin.replace("+psycopg", ""), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return server_url.rpartition("/")[0] + "/" + name


@dataclass
class Replica:
    url: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log: IO[bytes]

    def output(self) -> str:
        self.log.flush()
        return (self.data_dir.parent / f"{self.data_dir.name}.log").read_text(errors="replace")


def replica_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACESTORE_", "AWS_"))}
    env["TRACESTORE_PART_SIZE"] = str(PART)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return {**env, **settings}


def bucket_replica_env(
    database_url: str, s3: MotoServer, bucket: str, **settings: str
) -> dict[str, str]:
    """``replica_env`` of replicas sharing ``database_url`` and ``bucket`` of ``s3`` (under
    the prefix ``ts``), with moto's credentials."""
    return replica_env(
        TRACESTORE_DATABASE_URL=database_url,
        TRACESTORE_BLOB_URL=f"s3://{bucket}/ts",
        TRACESTORE_S3_ENDPOINT_URL=s3.endpoint_url,
        **AWS_ENV,
        **settings,
    )


def start_replica(data_dir: Path, env: dict[str, str], *args: str) -> Replica:
    port = free_port()
    log = open(data_dir.parent / f"{data_dir.name}.log", "wb")  # noqa: SIM115 - closed in stop
    command = [sys.executable, "-m", "tracestore.cli", "serve", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--data-dir", str(data_dir), *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return Replica(f"http://127.0.0.1:{port}", data_dir, process, log)


def wait_ready(replica: Replica, timeout: float = 90) -> httpx.Response:
    """The first /readyz answer of a replica that keeps running (fails on its exit)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(f"{replica.url}/readyz", timeout=5)
        except httpx.TransportError:
            pass
        code = replica.process.poll()
        assert code is None, f"replica exited {code}:\n{replica.output()}"
        assert time.monotonic() < deadline, f"replica never answered:\n{replica.output()}"
        time.sleep(0.1)


def stop(replica: Replica) -> None:
    if replica.process.poll() is None:
        stop_process(replica.process, timeout=30)
    replica.log.close()


@contextmanager
def replicas(
    root: Path, env: dict[str, str], count: int = REPLICAS, args: tuple[str, ...] = ()
) -> Iterator[list[Replica]]:
    """``count`` replicas (``serve`` with ``args``) started at the same instant (each with
    its own data directory, as on separate hosts), all ready; stopped at the end."""
    with ExitStack() as stack:
        started = []
        for index in range(count):
            replica = start_replica(root / f"replica{index}", env, *args)
            stack.callback(stop, replica)
            started.append(replica)
        for replica in started:
            answer = wait_ready(replica)
            assert answer.status_code == 200, (answer.text, replica.output())
        yield started


def admin_token(started: list[Replica]) -> str:
    """The bootstrap admin's token: exactly one replica made it."""
    found = [r.data_dir / "admin-token" for r in started if (r.data_dir / "admin-token").exists()]
    assert len(found) == 1, [r.output() for r in started]
    return found[0].read_text().strip()


def refusal(tmp_path: Path, env: dict[str, str], command: str = "serve") -> str:
    """The one line a `tracestore serve` (or ``command``) that must not start exits with."""
    words = ["serve", "--port", str(free_port())] if command == "serve" else [command]
    done = subprocess.run(
        [sys.executable, "-m", "tracestore.cli", *words, "--data-dir", str(tmp_path / "data")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("Warning:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def newest_revision() -> str:
    """The newest schema revision in migrations/versions: what `migrate` reports."""
    versions = Path(migrations.__file__).parent / "versions"
    return max(p.name.split("_", 1)[0] for p in versions.glob("[0-9]*_*.py"))


@contextmanager
def worker_process(
    root: Path, name: str, env: dict[str, str], data_dir: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A `tracestore worker` with ``env``'s settings (on ``data_dir``, by default
    ``root/name``); its output in ``root/name.log``."""
    with open(root / f"{name}.log", "wb") as log:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "tracestore.cli", "worker"),
                *("--data-dir", str(data_dir or root / name)),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                stop_process(process, timeout=30)
