"""Short reads on the request path (``Database.read_connection``): Core selects run with
less of SQLAlchemy's execution around them.

On SQLite a GET's two selects cost ~145 us through ``Connection.execute`` and ~38 us on the
DBAPI cursor (bench/request_cpu.py; docs/benchmarks.md): the execution context, its events
and the BEGIN that the read engine's "begin" event emits through a second execution cost
more than SQLite's own work. ``Reads`` compiles each statement once per database
(``Prepared``: its SQL text, its parameters in order, the result processors of its columns)
and runs it on the raw connection, in one read transaction of its own. On a server database,
or on a connection an ORM session holds, it is ``Connection.execute`` as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import Executable, Select
from sqlalchemy.sql.compiler import SQLCompiler

# Statements kept compiled per database: the GET's two, the list's per shape (listing_sql
# keeps 512 shapes); past this the cache starts afresh rather than growing.
PREPARED_LIMIT = 2048

Row = Sequence[Any]
_Processor = Callable[[Any], Any]


@dataclass(frozen=True)
class Prepared:
    """One select compiled for one dialect."""

    compiled: SQLCompiler
    sql: str
    names: tuple[str, ...]  # the positional parameters, in order
    defaults: Mapping[str, Any]  # the values of binds the statement carries itself
    binders: Mapping[str, _Processor]  # per parameter, what turns our value into the DBAPI's
    results: tuple[tuple[int, _Processor], ...]  # per column that has one, by position,
    # what turns the DBAPI's value into ours
    expanding: bool  # a parameter is rendered per call (``IN`` of a list)

    @classmethod
    def of(cls, statement: Select[Any], dialect: Dialect) -> Prepared:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        binders = {
            name: binder
            for name, bind in compiled.binds.items()
            if (binder := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }
        return cls(
            compiled=compiled,
            sql=compiled.string,
            names=tuple(compiled.positiontup or ()),
            defaults={name: bind.effective_value for name, bind in compiled.binds.items()},
            binders=binders,
            results=tuple(
                (index, process)
                for index, column in enumerate(statement.selected_columns)
                if (process := column.type.dialect_impl(dialect).result_processor(dialect, None))
            ),
            expanding=bool(compiled.literal_execute_params or compiled.post_compile_params),
        )

    def run(self, cursor: Any, params: Mapping[str, Any]) -> list[Row]:
        """The statement's rows for ``params``, on a DBAPI cursor."""
        if self.expanding:
            state = self.compiled.construct_expanded_state(dict(params))
            sql, names, given = state.statement, state.positiontup or (), state.parameters
            binders: Mapping[str, _Processor] = {**self.binders, **state.processors}
        else:
            sql, names, given, binders = self.sql, self.names, params, self.binders
        defaults = self.defaults
        values = []
        for name in names:
            value = given[name] if name in given else defaults[name]
            values.append(binders[name](value) if name in binders else value)
        cursor.execute(sql, values)
        rows: list[Row] = cursor.fetchall()
        if self.results:
            for number, row in enumerate(rows):
                converted = list(row)
                for index, process in self.results:
                    converted[index] = process(converted[index])
                rows[number] = converted
        return rows


class Reads:
    """The statements of one short read transaction (``Database.read_connection``): on a
    raw SQLite connection (``raw``), begun at the first statement and ended by ``close``,
    or on a SQLAlchemy ``Connection`` whose transaction its owner ends."""

    def __init__(
        self, *, raw: Any = None, connection: Connection | None = None, prepared: PreparedCache
    ) -> None:
        self._raw = raw
        self._cursor: Any = None
        self.connection = connection
        self._prepared = prepared

    def all(self, statement: Select[Any], params: Mapping[str, Any]) -> list[Row]:
        """Every row of ``statement`` with ``params``, as tuples (or Rows) by position."""
        if self.connection is not None:
            return list(self.connection.execute(statement, params).all())
        if self._cursor is None:
            self._cursor = self._raw.driver_connection.cursor()
            self._cursor.execute("BEGIN")
        return self._prepared.get(statement).run(self._cursor, params)

    def first(self, statement: Select[Any], params: Mapping[str, Any]) -> Row | None:
        rows = self.all(statement, params)
        return rows[0] if rows else None

    def execute(self, statement: Executable) -> None:
        """Run a statement that returns no rows (a server database's ``SET LOCAL``)."""
        if self.connection is None:
            raise TypeError("a raw SQLite read runs only selects")
        self.connection.execute(statement)

    def close(self) -> None:
        """Give the raw connection back to the pool, whose reset on return rolls its read
        transaction back (tests/test_reads.py holds that none stays open)."""
        if self._raw is None:
            return
        try:
            if self._cursor is not None:
                self._cursor.close()
        finally:
            raw, self._raw = self._raw, None
            raw.close()


class PreparedCache:
    """``Prepared`` statements of one database's dialect, compiled at first use."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._statements: dict[Select[Any], Prepared] = {}
        self._lock = threading.Lock()

    def get(self, statement: Select[Any]) -> Prepared:
        prepared = self._statements.get(statement)
        if prepared is None:
            prepared = Prepared.of(statement, self._dialect)
            with self._lock:
                if len(self._statements) >= PREPARED_LIMIT:
                    self._statements.clear()
                self._statements[statement] = prepared
        return prepared
