"""Shared fixtures: a real app over a real database and blob directory in tmp_path.

The database is SQLite unless ``TRACESTORE_TEST_DATABASE_URL`` names a PostgreSQL server
(the test command's second pass starts one); each test then gets its own database on it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.s3server import MotoServer
from tracestore.server.app import create_app
from tracestore.server.auth import ADMIN_TOKEN_FILE, bootstrap
from tracestore.server.services import Services, build_services
from tracestore.server.settings import MIB, Settings

REPO = Path(__file__).resolve().parents[1]
TESTDATA = REPO.parent / "shared" / "testdata"


class FakeClock:
    """A clock the tests move by hand (time travel without sleeping)."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def _database_url(tmp_path: Path) -> str | None:
    server = os.environ.get("TRACESTORE_TEST_DATABASE_URL")
    if not server:
        return None
    import psycopg

    name = "t_" + secrets.token_hex(6)
    admin_url = server.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = server.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=_database_url(tmp_path),
        part_size=5 * MIB,
        public_url="http://testserver",
    )


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


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoServer]:
    """A real S3-protocol server (moto, tests/s3server.py) shared by the session."""
    with MotoServer() as server:
        yield server
