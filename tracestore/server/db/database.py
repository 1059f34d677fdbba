"""The database: the engine and sessions of one URL (``Database``), how a request's work is
driven on it (``short_read``, ``short_write``: on the event loop's thread where the database
allows it, else in a worker thread), and migrating it.

The same tables (``db.py``) serve SQLite (embedded default, WAL mode) and PostgreSQL. Schema
changes go through Alembic migrations in ``migrations/``; ``Database.migrate()`` applies them
(``tracestore migrate``, and ``serve`` on start), one process at a time: on PostgreSQL under
an advisory lock (``serialize``), on SQLite under its write lock.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from anyio import to_thread
from sqlalchemy import create_engine, event, exc, inspect, make_url, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql import Insert

from tracestore.server.db.held_reads import SHARED_READS, HeldReads, SharedReads
from tracestore.server.db.loop_writes import NoWaitWrites, WriterBusy, committed
from tracestore.server.db.prepared import PreparedCache, Reads

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# The PostgreSQL advisory lock that serialises migrations and bootstrap across processes
# (an arbitrary constant: "trcstore" as 8 bytes, fits a bigint).
STARTUP_LOCK = 0x7472637374_6F7265
# Connections kept per engine: one for each thread of the app's request pool (``serve`` sizes
# anyio's limiter to match), so no request waits for one and none is opened and closed per
# request (a new SQLite connection costs its PRAGMAs); a few more for background work.
POOL_SIZE = 40
POOL_OVERFLOW = 10

P = ParamSpec("P")
T = TypeVar("T")


def shown_url(url: str) -> str:
    """A database URL fit for a message or log: without its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]


def schema_exists(url: str) -> bool:
    """Whether ``url`` holds a tracestore schema, without creating anything (a SQLite file
    is not made). Raises the driver's error when a server database cannot be reached."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1].partition("?")[0] if "///" in url else ""
        if not path or path == ":memory:" or not Path(path).exists():
            return False
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return inspect(connection).has_table("alembic_version")
    finally:
        engine.dispose()


class Database:
    """The engine and a session factory for one database URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        # A JSON column holds JSON: NaN or Infinity (no JSON; PostgreSQL refuses them, SQLite
        # would store them and every reader choke) is an error where it is written.
        kwargs: dict[str, Any] = {"json_serializer": functools.partial(json.dumps, allow_nan=False)}
        if ":memory:" not in url:  # an in-memory SQLite database has one connection per thread
            kwargs.update(pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
        if url.startswith("sqlite"):
            path = url.split("///", 1)[1].partition("?")[0] if "///" in url else ""
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                # SQLite would create it under the umask (0644): it holds token hashes and
                # every tenant's metadata. Its -wal and -shm files take the same mode.
                with suppress(FileExistsError):
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            # A server connection can die between uses (restart, idle timeout); a local
            # SQLite file cannot, so only server databases pay a ping per checkout.
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = create_engine(url, **kwargs)
        self.read_engine: Engine = self.engine
        if self.engine.dialect.name == "postgresql":
            event.listen(self.engine, "connect", _postgres_text_without_nul)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
            # Writers take the write lock at BEGIN: a read-then-write transaction that had
            # to upgrade its lock later could fail with SQLITE_BUSY instead of waiting.
            event.listen(self.engine, "begin", _sqlite_begin_immediate)
            self.read_engine = create_engine(url, **kwargs)
            event.listen(self.read_engine, "connect", _sqlite_pragmas)
            event.listen(self.read_engine, "begin", _sqlite_begin_deferred)
        # SQLite has one writer at a time, and a writer that finds the lock taken polls for
        # it, sleeping longer each time (its busy handler): under load, writes waited up to
        # seconds while the lock stood free. This process's writers queue here instead and
        # are woken as the one before ends; other processes still meet the busy handler.
        self._writers: AbstractContextManager[Any] = (
            threading.RLock() if self.engine.dialect.name == "sqlite" else nullcontext()
        )
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._read_sessions = sessionmaker(self.read_engine, expire_on_commit=False)
        self._prepared = PreparedCache(self.read_engine.dialect)
        self._held = HeldReads(self.read_engine)
        # The event loop's writes that do not wait (``writes_now``), where reads may be
        # inline too: a SQLite file.
        self.nowait: NoWaitWrites | None = (
            NoWaitWrites(self.engine, self._writers) if self.reads_inline else None
        )

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def reads_inline(self) -> bool:
        """Whether a short read may run on the event loop's thread (``short_read``): a
        SQLite file in WAL mode, whose readers never wait; not a server database (a round
        trip there, or a slow query, would stall every request), nor an in-memory one."""
        return self.dialect == "sqlite" and ":memory:" not in self.url

    async def short_read(self, read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``read(*args, **kwargs)``: a read of this database, a bounded amount, and of
        nothing slower than a local file (a traceset by id, a page of the list, a part
        PUT's check). On the event loop's own thread where the database allows it
        (``reads_inline``): a worker thread gives the GIL up at every statement and waits
        to take it back from the loop (the GIL convoy: a GET answered 2.5-4 x fewer
        requests per second so, bench/load.py); WAL readers never wait for a writer, so
        nothing blocks there. A server database's round trips keep to a worker thread."""
        if self.reads_inline:
            with self.inline_reads():
                return read(*args, **kwargs)
        return await to_thread.run_sync(functools.partial(read, *args, **kwargs))

    async def short_write(self, write: Callable[[], T]) -> T:
        """``write()``: work whose one write session (or ``insert_rows``) is its only side
        effect before the end, a short one, and whose other I/O is local (upload-url's
        start on the embedded store). On a SQLite file on the event loop's own thread if
        the write lock is free at once (``loop_writes``: this process's writers are waited
        for without blocking the loop), else in a worker thread that waits for the lock:
        a write sent there when another process held the lock did nothing on the loop."""
        if self.nowait is not None:
            try:
                return await self.nowait.run(write)
            except WriterBusy:
                pass  # another process writes: wait for it where waiting blocks no one
        return await to_thread.run_sync(write)

    @contextmanager
    def session(self, *, write: bool = True) -> Iterator[Session]:
        """A unit of work: committed when the block ends, rolled back on error. Inside
        ``shared_reads`` the read sessions are one (see there)."""
        shared = SHARED_READS.get()
        if shared is not None and shared.database is self:
            if not write:
                with shared.session() as session:
                    yield session
                return
            shared.end()  # reads after this write see it
        if write and self.nowait is not None and self.nowait.active:
            with self.nowait.session() as session:
                yield session
            return
        factory = self._sessions if write else self._read_sessions
        with self._writers if write else nullcontext(), factory() as session, session.begin():
            yield session

    @contextmanager
    def read_connection(self) -> Iterator[Reads]:
        """The statements of a short read that runs only Core selects (a GET by id, a list
        page, a part PUT's check), taking part in ``shared_reads``: a session the token's
        check handed over is used and ended, as ``session(write=False)`` would. Else, on
        SQLite, a pooled DBAPI connection without SQLAlchemy's execution around it
        (``reads.Reads``); on a server database a bare ``Connection``, without the ORM
        session (~30 us a request). The read transaction ends with the block."""
        shared = SHARED_READS.get()
        if shared is not None and shared.database is self and shared.holds_session:
            with shared.session() as session:
                yield Reads(connection=session.connection(), prepared=self._prepared)
            return
        if self.dialect == "sqlite":
            held = self._held.take()
            if held is None:
                reads = Reads(raw=self.read_engine.raw_connection(), prepared=self._prepared)
            else:
                reads = Reads(held=held.connection, prepared=self._prepared)
            try:
                yield reads
            finally:
                try:
                    reads.close()
                finally:
                    if held is not None:
                        self._held.give_back(held, ended=not reads.in_transaction)
            return
        with self.read_engine.connect() as connection:
            yield Reads(connection=connection, prepared=self._prepared)

    def insert_rows(self, inserts: Sequence[tuple[Insert, Sequence[Mapping[str, Any]]]]) -> None:
        """One write transaction that inserts these rows and does nothing else: each
        statement's rows (with the same keys each), in order. On SQLite on the DBAPI
        connection, each insert compiled once for its rows' columns (``reads.Prepared``),
        without a ``Connection`` or an ORM session around it: through those, upload-url's
        three inserts and their transaction cost ~0.4 ms more, two fifths of its CPU
        in-process (docs/benchmarks-journal.md).
        Inside ``writes_now`` the transaction begins at once or raises ``WriterBusy``, as
        ``session`` does there. A driver's error is raised as SQLAlchemy's
        (``exc.DBAPIError``), as ``Connection.execute`` raises it; on a server database it is
        ``Connection.execute`` in a ``session``."""
        if self.dialect != "sqlite":
            with self.session() as session:
                connection = session.connection()
                for statement, rows in inserts:
                    if rows:
                        connection.execute(statement, list(rows))
            return
        shared = SHARED_READS.get()
        if shared is not None and shared.database is self:
            shared.end()  # reads after this write see it, as after session's
        with self._driver_errors():
            if self.nowait is not None and self.nowait.active:
                with self.nowait.transaction() as raw:
                    self._run_inserts(raw, inserts)
                return
            with self._writers:
                pooled = self.engine.raw_connection()  # pysqlite's autocommit: BEGIN is ours
                try:
                    driver = pooled.dbapi_connection
                    assert isinstance(driver, sqlite3.Connection)
                    driver.execute("BEGIN IMMEDIATE").close()
                    with committed(driver):
                        self._run_inserts(driver, inserts)
                finally:
                    pooled.close()

    def _run_inserts(
        self, raw: sqlite3.Connection, inserts: Sequence[tuple[Insert, Sequence[Mapping[str, Any]]]]
    ) -> None:
        # The write engine's dialect is configured as the read engine's, whose cache this is.
        cursor = raw.cursor()
        try:
            for statement, rows in inserts:
                if rows:
                    prepared = self._prepared.get(statement, column_keys=tuple(rows[0]))
                    prepared.run_many(cursor, rows)
        finally:
            cursor.close()

    @contextmanager
    def _driver_errors(self) -> Iterator[None]:
        """The DBAPI's errors raised in this block raised as SQLAlchemy raises them."""
        dbapi_error = self.engine.dialect.loaded_dbapi.Error
        try:
            yield
        except dbapi_error as error:
            raise exc.DBAPIError.instance(
                None, None, error, dbapi_error, dialect=self.engine.dialect
            ) from error

    @contextmanager
    def inline_reads(self) -> Iterator[None]:
        """Within this block, this thread's SQLite reads (``read_connection``) run on a DBAPI
        connection the thread keeps, outside the pool: the pool's checkout and its reset on
        return cost ~12 us of a ~120 us GET. For the event loop's thread
        (``short_read``), whose reads run one at a time; a read block opened inside
        another takes a pooled connection, as anywhere else."""
        self._held.inline(+1)
        try:
            yield
        finally:
            self._held.inline(-1)

    @contextmanager
    def writes_now(self) -> Iterator[None]:
        """Within this block, this thread's write session (one) begins at once or raises
        ``nowait.WriterBusy`` before any statement: for the event loop's thread, on SQLite
        (``short_write``; ``loop_writes`` says why and how)."""
        if self.nowait is None:
            raise RuntimeError("writes that do not wait are a SQLite file's")
        with self.nowait.block():
            yield

    @contextmanager
    def shared_reads(self) -> Iterator[None]:
        """Within this block (one request in one thread: its authentication, then its use
        case) the first read session is not ended when its own block ends but handed to the
        next read block (the use case's first query), which ends it: one session and one
        pooled connection where there were two, and no read transaction held open longer
        than before. A write session ends a handed-over session first, so the reads after
        a write see it; nested read blocks share their outer one."""
        shared = SharedReads(self, self._read_sessions)
        token = SHARED_READS.set(shared)
        try:
            yield
        finally:
            SHARED_READS.reset(token)
            shared.end()

    def migrate(self) -> None:
        """Bring the schema to the newest migration (Alembic ``upgrade head``)."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        with self.engine.begin() as connection:
            serialize(connection)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def dispose(self) -> None:
        self._held.close_all()
        if self.nowait is not None:
            self.nowait.close()
        self.engine.dispose()
        self.read_engine.dispose()


def serialize(connection: Session | Connection) -> None:
    """Make the rest of this transaction run one process at a time (migrations, bootstrap,
    the first signing key). On PostgreSQL a transaction-scoped advisory lock, released at
    commit; SQLite writers already run one at a time (BEGIN IMMEDIATE)."""
    bind = connection if isinstance(connection, Connection) else connection.get_bind()
    if bind.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": STARTUP_LOCK})


def _postgres_text_without_nul(dbapi_connection: Any, _record: Any) -> None:
    """PostgreSQL's text cannot hold U+0000; psycopg refuses to send one (a 500). No stored
    text holds one (requests refuse it; ``jsontext.plain`` maps it in metadata), so a
    parameter carrying one can only be a lookup (an id, a file name, a fact): sent as U+FFFD,
    which no id or file name holds, it finds nothing, as it does on SQLite."""
    from psycopg.types.string import StrBinaryDumper, StrDumperUnknown

    class BinaryWithoutNul(StrBinaryDumper):
        def dump(self, obj: str) -> Any:
            return super().dump(obj.replace("\x00", "\ufffd"))

    class TextWithoutNul(StrDumperUnknown):
        def dump(self, obj: str) -> Any:
            return super().dump(obj.replace("\x00", "\ufffd"))

    # The text dumper last: it is the one psycopg picks for an untyped %s, as by default.
    dbapi_connection.adapters.register_dumper(str, BinaryWithoutNul)
    dbapi_connection.adapters.register_dumper(str, TextWithoutNul)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy, not pysqlite, emit BEGIN so the "begin" hook below can shape it.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
    # SQLite's own lower() and LIKE fold ASCII only; the list's name search needs Unicode.
    dbapi_connection.create_function("unicode_lower", 1, _unicode_lower, deterministic=True)


def _unicode_lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _sqlite_begin_immediate(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _sqlite_begin_deferred(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN")


def utcnow() -> datetime:
    return datetime.now(UTC)
