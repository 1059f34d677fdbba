"""``Database.insert_rows`` on SQLite: rows inserted on the DBAPI connection, each insert
compiled once (``reads.Prepared.run_many``), are stored as SQLAlchemy's ``Connection.execute``
stores them, value for value and storage class for storage class; a driver's error comes out
as SQLAlchemy's and the transaction is rolled back whole. Two fresh databases side by side; no
service around them. (Inside ``writes_now``: tests/test_nowait_writes.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import Table, exc, insert, text
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

from tracestore import jsontext
from tracestore.server import db
from tracestore.server.db.database import Database
from tracestore.server.db.prepared import Prepared
from tracestore.server.tracesets import metadata_columns

TABLES = {
    name: cast(Table, model.__table__)
    for name, model in (
        ("tracesets", db.Traceset),
        ("traceset_files", db.TracesetFile),
        ("upload_sessions", db.UploadSession),
    )
}
WHEN = datetime(2026, 12, 3, 13, 5, 7, 123456, tzinfo=UTC)
ELSEWHERE = timezone(timedelta(hours=-7, minutes=-30))  # stored as the same instant in UTC


def _database(path: Path) -> Database:
    database = Database(f"sqlite:///{path}")
    db.Base.metadata.create_all(database.engine)
    with database.session() as session:
        session.add(db.Tenant(id="tn_1", name="t", created_at=WHEN))
        session.add(db.Workspace(id="ws_1", tenant_id="tn_1", name="w", created_at=WHEN))
        session.add(db.User(id="us_1", tenant_id="tn_1", name="u", created_at=WHEN))
    return database


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Database, Database]]:
    ours, theirs = _database(tmp_path / "ours.db"), _database(tmp_path / "theirs.db")
    yield ours, theirs
    ours.dispose()
    theirs.dispose()


def _traceset(number: int, workload: Any, suffix: str = "", **changes: Any) -> dict[str, Any]:
    row = {
        "id": f"ts_{number}{suffix}",
        "tenant_id": "tn_1",
        "workspace_id": "ws_1",
        "created_by": "us_1",
        "name": f"run \u00e9\u00fc {number}",
        "description": None,
        "tags": ["a", "\u4e2d", 'q"uote'],
        "status": "uploading",
        "scope": "workspace",
        "created_at": WHEN,
        "updated_at": WHEN.astimezone(ELSEWHERE),
        "expires_at": None,
        "ttl_days": 30,
        "rank_count": 2**40,
        "total_size": 2**62,
        "file_count": 0,
        "hash": None,
        **metadata_columns(workload),
    }
    return {**row, **changes}


def _rows(suffix: str) -> dict[str, list[dict[str, Any]]]:
    """Rows of the three tables upload-url writes, their values at the edges of their types
    (None, unicode, JSON of every kind, numbers past a double, timestamps in another zone)."""
    workloads = [
        None,
        {},
        jsontext.loads('{"shape": {"rankCount": 8, "dp": 2.50}, "x": [1, null, "\\u00e9"]}'),
        jsontext.loads('{"workload_family": "gpt", "n": 1e400, "m": 12345678901234567890}'),
    ]
    tracesets = [_traceset(n, w, suffix) for n, w in enumerate(workloads)]
    tracesets.append(_traceset(9, None, suffix, description="d" * 5000, tags=[], expires_at=WHEN))
    files = [
        {
            "traceset_id": f"ts_1{suffix}",
            "position": position,
            "name": f"rank_{position}.json",
            "size": 2**35 + position,
            "role": "primary" if position else "supporting",
            "content_type": None if position % 2 else "application/json",
            "expected_sha256": None if position % 3 else "ab" * 32,
            "staging_handle": f"upload_x/{position}",
            "metadata_status": "pending",
        }
        for position in range(9)
    ]
    sessions = [
        {
            "id": f"upload_{n}{suffix}",
            "traceset_id": f"ts_{n}{suffix}",
            "state": "open",
            "part_size": 64 * 2**20,
            "created_at": WHEN.astimezone(ELSEWHERE),
            "expires_at": WHEN + timedelta(days=n),
        }
        for n in range(2)
    ]
    return {"tracesets": tracesets, "traceset_files": files, "upload_sessions": sessions}


def _stored(database: Database, table: str) -> list[tuple[Any, ...]]:
    """Every column of every row as SQLite holds it: its value and its storage class."""
    columns = [column.name for column in TABLES[table].columns]
    shown = ", ".join(f"{name}, typeof({name})" for name in columns)
    with database.engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(f"SELECT {shown} FROM {table}"))]


def test_rows_inserted_on_the_cursor_are_stored_as_sqlalchemys_execution_stores_them(
    pair: tuple[Database, Database],
) -> None:
    ours, theirs = pair
    for suffix in ("", "_again"):  # the second time from the compiled inserts kept
        rows = _rows(suffix)
        ours.insert_rows([(insert(TABLES[table]), given) for table, given in rows.items()])
        with theirs.session() as session:
            for table, given in rows.items():
                session.connection().execute(insert(TABLES[table]), given)
        for table in rows:
            stored = _stored(ours, table)
            assert stored == _stored(theirs, table)
            assert len(stored) == len(rows[table]) * (2 if suffix else 1)


def test_a_driver_error_is_raised_as_sqlalchemys_and_writes_nothing(
    pair: tuple[Database, Database],
) -> None:
    ours, _ = pair
    tracesets = insert(TABLES["tracesets"])
    ours.insert_rows([(tracesets, [_traceset(1, None)])])
    with pytest.raises(exc.IntegrityError, match=r"UNIQUE constraint failed: tracesets\.id"):
        ours.insert_rows([(tracesets, [_traceset(2, None)]), (tracesets, [_traceset(1, None)])])
    # Rolled back whole: the row before the duplicate is not kept ...
    assert [row[0] for row in _stored(ours, "tracesets")] == ["ts_1"]
    with pytest.raises(exc.IntegrityError, match="FOREIGN KEY constraint failed"):
        ours.insert_rows([(tracesets, [_traceset(3, None, tenant_id="x")])])
    # ... and the connection went back with no transaction open, the lock free.
    ours.insert_rows([(tracesets, [_traceset(4, None)])])
    assert [row[0] for row in _stored(ours, "tracesets")] == ["ts_1", "ts_4"]


def test_an_insert_is_prepared_for_its_rows_columns_only() -> None:
    statement = insert(TABLES["upload_sessions"])
    with pytest.raises(TypeError, match="rows' columns"):
        Prepared.of(statement, sqlite_dialect())
    with pytest.raises(TypeError, match="rows' columns"):
        Prepared.of(statement.returning(TABLES["upload_sessions"].c.id), sqlite_dialect(), ["id"])
    prepared = Prepared.of(statement, sqlite_dialect(), ["id", "state"])
    assert prepared.names == ("id", "state")
