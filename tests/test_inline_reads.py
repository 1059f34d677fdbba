"""The event loop's reads on SQLite (``Database.inline_reads``): one DBAPI connection kept by
the thread, outside the pool, whose read transaction ends with every block as a pooled
one's does; a block inside another, a disposed database and a thread that ends each get a
connection of their own."""

from __future__ import annotations

import gc
import sqlite3
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, func, literal_column, select
from sqlalchemy.sql import Select

from tests.support.uploading import upload
from tracestore.server import db
from tracestore.server.auth import create_tenant
from tracestore.server.services import Services

T = db.Traceset.__table__
COUNT: Select[Any] = select(func.count()).select_from(db.Tenant)


@pytest.fixture
def sqlite_only(services: Services) -> None:
    if services.db.dialect != "sqlite":
        pytest.skip("inline reads are SQLite's; a server database's reads keep to threads")


@pytest.fixture
def checkouts(services: Services) -> list[Any]:
    """The DBAPI connections the read engine's pool hands out from now on."""
    taken: list[Any] = []
    event.listen(
        services.db.read_engine, "checkout", lambda dbapi, _record, _proxy: taken.append(dbapi)
    )
    return taken


def _write_tenant(services: Services, name: str) -> None:
    def write() -> None:
        with services.db.session() as session:
            create_tenant(session, name, services.now())

    writer = threading.Thread(target=write)
    writer.start()
    writer.join()


def test_inline_reads_keep_one_connection_and_end_each_transaction(
    sqlite_only: None, services: Services, checkouts: list[Any]
) -> None:
    with services.db.inline_reads():
        for _ in range(20):
            with services.db.read_connection() as reads:
                before = reads.all(COUNT, {})[0][0]
        kept = checkouts[0]
        assert len(checkouts) == 1  # made once, from the pool (its PRAGMAs), then kept
        assert not kept.in_transaction
        with pytest.raises(LookupError), services.db.read_connection() as reads:
            reads.all(COUNT, {})
            raise LookupError("the use case gave up")
        assert not kept.in_transaction
        with (
            pytest.raises(Exception, match="no such column"),
            services.db.read_connection() as reads,
        ):
            reads.all(COUNT, {})
            reads.all(select(T.c.id, literal_column("nosuchcolumn")), {})
        assert not kept.in_transaction
        # A block sees one snapshot; the next block sees what was written in between.
        with services.db.read_connection() as reads:
            assert reads.all(COUNT, {})[0][0] == before
            _write_tenant(services, "written-during-a-read")
            assert reads.all(COUNT, {})[0][0] == before
        with services.db.read_connection() as reads:
            assert reads.all(COUNT, {})[0][0] == before + 1
    assert len(checkouts) == 1
    # Outside inline_reads, reads take pooled connections again.
    with services.db.read_connection() as reads:
        reads.all(COUNT, {})
    assert len(checkouts) == 2 and checkouts[1] is not kept


def test_a_read_inside_another_takes_a_pooled_connection(
    sqlite_only: None, services: Services, checkouts: list[Any]
) -> None:
    with services.db.inline_reads(), services.db.read_connection() as outer:
        before = outer.all(COUNT, {})[0][0]
        _write_tenant(services, "written-between-outer-reads")
        with services.db.read_connection() as inner:
            assert inner.all(COUNT, {})[0][0] == before + 1  # its own, newer snapshot
        assert len(checkouts) == 2
        assert outer.all(COUNT, {})[0][0] == before  # the outer snapshot held
    assert not any(connection.in_transaction for connection in checkouts)


def test_dispose_closes_the_kept_connections_and_reads_go_on(
    sqlite_only: None, services: Services, checkouts: list[Any]
) -> None:
    with services.db.inline_reads():
        with services.db.read_connection() as reads:
            reads.all(COUNT, {})
        services.db.dispose()
        with pytest.raises(sqlite3.ProgrammingError):
            checkouts[0].execute("SELECT 1")  # closed
        with services.db.read_connection() as reads:
            assert reads.all(COUNT, {})[0][0] >= 1
    assert len(checkouts) == 2


def test_a_threads_kept_connection_goes_with_the_thread(
    sqlite_only: None, services: Services, checkouts: list[Any]
) -> None:
    def read() -> None:
        with services.db.inline_reads(), services.db.read_connection() as reads:
            reads.all(COUNT, {})

    for _ in range(3):
        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
    gc.collect()
    assert len(checkouts) == 3  # one per thread
    assert not services.db._held._every
    for connection in checkouts:
        with pytest.raises(sqlite3.ProgrammingError):
            connection.execute("SELECT 1")  # closed as its thread's state went


def test_the_get_and_the_list_read_on_the_loops_kept_connection(
    sqlite_only: None, http: TestClient, checkouts: list[Any]
) -> None:
    stored = upload(http, {"notes.txt": (b"hello", "supporting")}, name="kept")
    http.get(f"/api/v1/tracesets/{stored['id']}")  # the token's check, then cached
    checkouts.clear()
    for _ in range(10):
        assert http.get(f"/api/v1/tracesets/{stored['id']}").status_code == 200
        assert http.get("/api/v1/tracesets", params={"limit": 5}).status_code == 200
    assert checkouts == []
