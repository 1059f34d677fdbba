"""The query plans ``bench/list.py`` prints: the SELECT the list use case sends, captured from
the DBAPI cursor as it runs, then sent again under ``EXPLAIN (ANALYZE, BUFFERS)`` on PostgreSQL
or ``EXPLAIN QUERY PLAN`` on SQLite."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import event

from tracestore.server.db import prepared
from tracestore.server.db.database import Database


class _Recording:
    """A DBAPI cursor that notes each statement it is given (``prepared.Prepared.run`` sends
    SQLite's selects straight to the cursor, past SQLAlchemy's events)."""

    def __init__(self, cursor: Any, notes: Callable[[str, Any], None]) -> None:
        self._cursor, self._notes = cursor, notes

    def execute(self, statement: str, parameters: Any) -> Any:
        self._notes(statement, parameters)
        return self._cursor.execute(statement, parameters)

    def fetchall(self) -> Any:
        return self._cursor.fetchall()


def explain(database: Database, run: Callable[[], int]) -> str:
    """EXPLAIN of the SELECT the use case sends (captured from the cursor, then re-sent)."""
    captured: list[tuple[str, Any]] = []

    def note(statement: str, parameters: Any) -> None:
        # The page's SELECT (its uploaders joined), not the tag counts and table size before
        # it or the summary query after it.
        if statement.lstrip().upper().startswith("SELECT") and "JOIN users" in statement:
            # A positional list as exec_driver_sql takes it (a tuple).
            captured.append(
                (statement, tuple(parameters) if isinstance(parameters, list) else parameters)
            )

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        note(statement, parameters)

    def prepared_run(self: prepared.Prepared, cursor: Any, params: Any) -> Any:
        return sent(self, _Recording(cursor, note), params)

    sent = prepared.Prepared.run
    prepared.Prepared.run = prepared_run  # type: ignore[method-assign]
    for engine in {database.engine, database.read_engine}:
        event.listen(engine, "before_cursor_execute", capture)
    try:
        run()
    finally:
        prepared.Prepared.run = sent  # type: ignore[method-assign]
        for engine in {database.engine, database.read_engine}:
            event.remove(engine, "before_cursor_execute", capture)
    statement, parameters = captured[0]
    prefix = (
        "EXPLAIN (ANALYZE, BUFFERS) "
        if database.dialect == "postgresql"
        else ("EXPLAIN QUERY PLAN ")
    )
    with database.read_engine.connect() as conn:
        result = conn.exec_driver_sql(prefix + statement, parameters).all()
    if database.dialect == "postgresql":
        return "\n".join(str(r[0]) for r in result)
    return "\n".join(f"{'  ' * 0}{r[-1]}" for r in result)
