"""Shared fixtures: a real app over a real database and blob directory in tmp_path.

The database is SQLite unless ``TRACESTORE_TEST_DATABASE_URL`` names a PostgreSQL server;
with ``TRACESTORE_TEST_POSTGRES=1`` the session starts a throwaway PostgreSQL 15 cluster itself
(tests/support/pgserver.py) and fails loudly when it cannot. Each test then gets its own database on
it, copied from a template database migrated once per session.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.s3server import MotoServer
from tracestore.cli import main
from tracestore.server.app import create_app
from tracestore.server.auth import ADMIN_TOKEN_FILE, bootstrap
from tracestore.server.services import Services, build_services
from tracestore.server.settings import MIB, Settings


def _database_url(tmp_path: Path) -> str | None:
    server = os.environ.get("TRACESTORE_TEST_DATABASE_URL")
    if not server:
        return None
    import psycopg

    name = "t_" + secrets.token_hex(6)
    admin_url = server.replace("postgresql+psycopg://", "postgresql://")
    template = os.environ.get("TRACESTORE_TEST_DATABASE_TEMPLATE")
    with psycopg.connect(admin_url, autocommit=True) as connection:
        if template:
            connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        else:
            connection.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = server.rpartition("/")
    return f"{base}/{name}"


def _drop_database(url: str | None) -> None:
    if not url or not url.startswith("postgresql"):
        return
    import psycopg

    base, _, name = url.rpartition("/")
    admin_url = f"{base}/postgres".replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session", autouse=True)
def postgres_server() -> Iterator[str | None]:
    """With ``TRACESTORE_TEST_POSTGRES=1``: a throwaway PostgreSQL cluster for the session,
    named to the tests by ``TRACESTORE_TEST_DATABASE_URL``. Never skips: if it cannot start,
    every test errors with the reason."""
    if os.environ.get("TRACESTORE_TEST_POSTGRES") != "1" or os.environ.get(
        "TRACESTORE_TEST_DATABASE_URL"
    ):
        yield os.environ.get("TRACESTORE_TEST_DATABASE_URL")
        return
    import psycopg

    from tests.support.pgserver import PostgresServer
    from tracestore.server.db.database import Database

    server = PostgresServer().start()
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as connection:
            connection.execute('CREATE DATABASE "t_template"')
        template = Database(server.url.rpartition("/")[0] + "/t_template")
        template.migrate()
        template.dispose()
        os.environ["TRACESTORE_TEST_DATABASE_URL"] = server.url
        os.environ["TRACESTORE_TEST_DATABASE_TEMPLATE"] = "t_template"
        yield server.url
    finally:
        os.environ.pop("TRACESTORE_TEST_DATABASE_URL", None)
        os.environ.pop("TRACESTORE_TEST_DATABASE_TEMPLATE", None)
        server.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The PostgreSQL pass runs the tests that use the service's database; the others
    (pure rules, inspectors, archives, servers with their own data directory) ran on the
    SQLite pass already and would only repeat themselves."""
    if os.environ.get("TRACESTORE_TEST_POSTGRES") != "1":
        return
    keep = [
        item
        for item in items
        if "services" in getattr(item, "fixturenames", ())
        and item.get_closest_marker("engine_independent") is None
    ]
    deselected = [item for item in items if item not in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = keep


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once per session; each test starts from a copy."""
    from tracestore.server.db.database import Database

    path = tmp_path_factory.mktemp("sqlite-template") / "tracestore.db"
    database = Database(f"sqlite:///{path}")
    database.migrate()
    database.dispose()
    return path


@pytest.fixture
def settings(tmp_path: Path, sqlite_template: Path) -> Iterator[Settings]:
    database_url = _database_url(tmp_path)
    if database_url is None:
        (tmp_path / "data").mkdir()
        shutil.copyfile(sqlite_template, tmp_path / "data" / "tracestore.db")
    yield Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        part_size=5 * MIB,
        # Jobs run when a test waits for them (wait_for_background), not on a thread that
        # would sweep whenever a test moves the clock; tests/test_jobs.py runs the thread.
        in_process_worker=False,
    )
    _drop_database(database_url)


@pytest.fixture
def services(settings: Settings, clock: FakeClock) -> Iterator[Services]:
    built = build_services(settings, clock=clock)
    bootstrap(built.db, settings.data_dir, clock())
    yield built
    built.close()


@pytest.fixture
def admin_token(services: Services) -> str:
    return (services.settings.data_dir / ADMIN_TOKEN_FILE).read_text().strip()


@pytest.fixture
def http(services: Services, admin_token: str) -> Iterator[TestClient]:
    """An httpx client on the real app, authenticated as the bootstrap admin."""
    app = create_app(services=services)
    with TestClient(app, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {admin_token}"
        yield client


@pytest.fixture
def app_http(services: Services) -> Iterator[TestClient]:
    """A TestClient with no token of its own: the Client or the command must send it."""
    with TestClient(create_app(services=services), raise_server_exceptions=False) as http:
        yield http


@pytest.fixture
def run(app_http: TestClient, admin_token: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``run("ls", "--json")``: a client command through Click's runner against the app
    in-process, with the admin token unless given another (``token=``)."""
    for name in ("TRACESTORE_URL", "TRACESTORE_TOKEN", "TRACESTORE_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()

    def invoke(command: str, *args: str, token: str = admin_token) -> Result:
        words = [command, "--url", "http://testserver", *args, "--token", token]
        return runner.invoke(main, words, obj={"http": app_http})

    yield invoke


@pytest.fixture
def both(services: Services, admin_token: str) -> Iterator[tuple[TestClient, TestClient]]:
    """The app with its lanes, and the same app routing everything through FastAPI
    (tests/support/laning.py holds the one to the other)."""
    with (
        TestClient(create_app(services=services), raise_server_exceptions=False) as laned,
        TestClient(
            create_app(services=services, with_lanes=False), raise_server_exceptions=False
        ) as routed,
    ):
        yield laned, routed


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoServer]:
    """A real S3-protocol server (moto, tests/support/s3server.py) shared by the session."""
    with MotoServer() as server:
        yield server
