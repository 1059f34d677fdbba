"""Short reads on the request path (``Database.read_connection``): Core selects run with
less of SQLAlchemy's execution around them.

On SQLite a GET's two selects cost ~145 us through ``Connection.execute`` and ~38 us on the
DBAPI cursor (bench/request_cpu.py; docs/benchmarks-journal.md): the execution context, its events
and the BEGIN that the read engine's "begin" event emits through a second execution cost
more than SQLite's own work. ``Reads`` compiles each statement once per database
(``Prepared``: its SQL text, its parameters in order, the result processors of its columns)
and runs it on the raw connection, in one read transaction of its own. On a server database,
or on a connection an ORM session holds, it is ``Connection.execute`` as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import Executable, Insert, Select
from sqlalchemy.sql.compiler import SQLCompiler

# Statements kept compiled per database: the GET's two, a part PUT's, upload-url's three
# inserts, the list's summary, and the list's by shape (listing_sql keeps 512 shapes'
# selects), with room to spare.
PREPARED_LIMIT = 640
# Expansions kept per expanding statement (one per count of items: a page's ids, up to
# the page size; a caller's workspaces).
EXPANSIONS_LIMIT = 256

Row = Sequence[Any]
_Processor = Callable[[Any], Any]


@dataclass(frozen=True)
class Prepared:
    """One select compiled for one dialect, or one insert of rows with the same columns
    (``run_many``)."""

    compiled: SQLCompiler
    sql: str
    names: tuple[str, ...]  # the positional parameters, in order
    defaults: Mapping[str, Any]  # the values of binds the statement carries itself
    binders: Mapping[str, _Processor]  # per parameter, what turns our value into the DBAPI's
    results: tuple[tuple[int, _Processor], ...]  # per column that has one, by position,
    # what turns the DBAPI's value into ours
    expanding: tuple[str, ...]  # the parameters rendered per call (``IN`` of a list)
    literal: bool  # a parameter's value is rendered into the SQL text
    # Per count of each expanding list's items: the SQL and where each positional value
    # comes from (``_expansion``).
    expansions: dict[tuple[int, ...], tuple[str, tuple[_Source, ...]]] = field(
        default_factory=dict, compare=False
    )

    @classmethod
    def of(
        cls,
        statement: Select[Any] | Insert,
        dialect: Dialect,
        column_keys: Sequence[str] | None = None,
    ) -> Prepared:
        """``statement`` compiled; an insert for the columns ``column_keys`` (its rows'
        keys), as ``Connection.execute`` compiles it for rows with those keys."""
        if isinstance(statement, Insert):
            if column_keys is None or statement._returning:
                raise TypeError("an insert is prepared for its rows' columns, returning none")
            compiled = statement.compile(dialect=dialect, column_keys=list(column_keys))
            selected: list[Any] = []
        else:
            compiled = statement.compile(dialect=dialect)
            selected = list(statement.selected_columns)
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
                for index, column in enumerate(selected)
                if (process := column.type.dialect_impl(dialect).result_processor(dialect, None))
            ),
            expanding=tuple(compiled.bind_names[bind] for bind in compiled.post_compile_params),
            literal=bool(compiled.literal_execute_params),
        )

    def run(self, cursor: Any, params: Mapping[str, Any]) -> list[Row]:
        """The statement's rows for ``params``, on a DBAPI cursor."""
        binders, defaults = self.binders, self.defaults
        values = []
        if self.literal:
            state = self.compiled.construct_expanded_state(dict(params))
            sql, given = state.statement, state.parameters
            every = {**binders, **state.processors}
            for name in state.positiontup or ():
                value = given[name]
                values.append(every[name](value) if name in every else value)
        elif self.expanding:
            sql, sources = self._expansion(params)
            for source, index, constant in sources:
                if source is None:
                    values.append(constant)
                    continue
                value = params[source] if index is None else params[source][index]
                values.append(binders[source](value) if source in binders else value)
        else:
            sql = self.sql
            for name in self.names:
                value = params[name] if name in params else defaults[name]
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

    def run_many(self, cursor: Any, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run an insert of ``rows`` (each with the keys it was prepared for) on a DBAPI
        cursor, in one ``executemany``."""
        if self.expanding or self.literal:
            raise TypeError("run_many runs a statement of plain parameters")
        binders, names = self.binders, self.names
        cursor.executemany(
            self.sql,
            [
                [binders[name](row[name]) if name in binders else row[name] for name in names]
                for row in rows
            ],
        )

    def _expansion(self, params: Mapping[str, Any]) -> tuple[str, tuple[_Source, ...]]:
        """The SQL of an expanding statement for as many items as ``params`` hold, and the
        source of each positional value: SQLAlchemy's ``construct_expanded_state`` run
        once per count of items, on markers that say where each value is taken from (it
        cost ~40 us a call; a list page runs one). A value the statement renders itself (a
        literal) is kept as it was rendered."""
        key = tuple(
            len(params[name] if name in params else self.defaults[name]) for name in self.expanding
        )
        found = self.expansions.get(key)
        if found is not None:
            return found
        probe = {
            name: [_Marker(name, i) for i in range(len(value))]
            if name in self.expanding
            else _Marker(name, None)
            for name, value in params.items()
        }
        state = self.compiled.construct_expanded_state(probe)
        sources: list[_Source] = []
        for slot in state.positiontup or ():
            value = state.parameters[slot]
            if isinstance(value, _Marker):
                sources.append((value.name, value.index, None))
            else:
                processor = self.binders.get(slot) or state.processors.get(slot)
                sources.append((None, None, processor(value) if processor else value))
        found = (state.statement, tuple(sources))
        if len(self.expansions) < EXPANSIONS_LIMIT:
            self.expansions[key] = found
        return found


@dataclass(frozen=True)
class _Marker:
    """Stands for ``params[name]`` (or its item ``index``) in ``Prepared._expansion``."""

    name: str
    index: int | None


# A positional value's source: (parameter, item index or None, None), or (None, None, value).
_Source = tuple[str | None, int | None, Any]


class Reads:
    """The statements of one short read transaction (``Database.read_connection``): on a
    SQLite DBAPI connection, pooled (``raw``) or kept by its thread (``held``), begun at
    the first statement and ended by ``close``; or on a SQLAlchemy ``Connection`` whose
    transaction its owner ends."""

    def __init__(
        self,
        *,
        raw: Any = None,
        held: Any = None,
        connection: Connection | None = None,
        prepared: PreparedCache,
    ) -> None:
        self._raw = raw  # a pooled connection (SQLAlchemy's), given back by close
        self._held = held  # or a DBAPI connection its owner keeps (Database.inline_reads)
        self._driver: Any = held if held is not None else raw and raw.driver_connection
        self._cursor: Any = None
        self.connection = connection
        self._prepared = prepared

    def all(
        self, statement: Select[Any], params: Mapping[str, Any], *, key: Hashable | None = None
    ) -> list[Row]:
        """Every row of ``statement`` with ``params``, as tuples (or Rows) by position;
        ``key`` names the statement for ``PreparedCache`` when its object may be rebuilt."""
        if self.connection is not None:
            return list(self.connection.execute(statement, params).all())
        if self._cursor is None:
            self._cursor = self._driver.cursor()
            self._cursor.execute("BEGIN")
        return self._prepared.get(statement, key).run(self._cursor, params)

    def first(self, statement: Select[Any], params: Mapping[str, Any]) -> Row | None:
        rows = self.all(statement, params)
        return rows[0] if rows else None

    def execute(self, statement: Executable) -> None:
        """Run a statement that returns no rows (a server database's ``SET LOCAL``)."""
        if self.connection is None:
            raise TypeError("a raw SQLite read runs only selects")
        self.connection.execute(statement)

    @property
    def in_transaction(self) -> bool:
        """Whether a kept connection's read transaction is open (after ``close``: it could
        not be ended)."""
        return self._held is not None and bool(self._held.in_transaction)

    def close(self) -> None:
        """End the read transaction: a pooled connection goes back to the pool, whose reset
        on return rolls it back; a kept one is rolled back here (tests/test_reads.py holds
        that none stays open)."""
        try:
            if self._cursor is not None:
                self._cursor.close()
        finally:
            if self._held is not None:
                if self._held.in_transaction:
                    self._held.rollback()
            elif self._raw is not None:
                raw, self._raw = self._raw, None
                raw.close()


class PreparedCache:
    """``Prepared`` statements of one database's dialect, compiled at first use, the least
    recently used dropped past PREPARED_LIMIT. A statement is found by the ``key`` its
    caller gives (the list's query shape: a shape whose select listing_sql made again
    after dropping it from its own cache is the same statement) or else by itself (the
    module-level selects of a GET and a part PUT)."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._statements: OrderedDict[Hashable, Prepared] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self,
        statement: Select[Any] | Insert,
        key: Hashable | None = None,
        column_keys: Sequence[str] | None = None,
    ) -> Prepared:
        """``statement`` prepared; an insert for the columns ``column_keys``."""
        if key is None:
            key = statement if column_keys is None else (statement, tuple(column_keys))
        with self._lock:
            prepared = self._statements.get(key)
            if prepared is not None:
                self._statements.move_to_end(key)
                return prepared
        prepared = Prepared.of(statement, self._dialect, column_keys)
        with self._lock:
            self._statements[key] = prepared
            while len(self._statements) > PREPARED_LIMIT:
                self._statements.popitem(last=False)
        return prepared
