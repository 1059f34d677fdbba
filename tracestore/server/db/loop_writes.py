"""Writes that do not wait for SQLite's write lock, for the event loop's own thread
(``Database.short_write``, ``Database.writes_now``).

A write handed to a worker thread costs the hop and, under load, the GIL's hand-offs at every
statement (the convoy ``Database.short_read`` describes): a third of an upload-url's CPU
(docs/benchmarks-journal.md). A short write of a local SQLite file can run on the loop instead,
provided it never waits there: so it takes this process's writer lock only if it is free
at once, and begins on a connection whose busy timeout is 0. If either is taken it raises
``WriterBusy`` before any statement. The caller waits for this process's writer without
blocking the loop (``writer_held``) and tries again; when another process writes, it runs
the use case again in a thread, which waits as every write does. (Sending the write to a
thread while this process's writer held the lock fed itself: every write that waited in a
thread kept the lock taken for the next, and upload-url fell back to the hop's cost.)

The kept connection makes no automatic WAL checkpoint at commit (an fsync of the database
and the log, ~5 ms here, every thousand pages): ``checkpoint_due`` says when the writes made
here have filled enough of the log, and ``checkpoint`` (for a worker thread) copies it back."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session

log = logging.getLogger("tracestore")

# Commits made here between checkpoints. An upload-url writes ~37 pages to the log, so 64 of
# them make ~2,400 pages (~10 MB at 4 KiB), a little over twice SQLite's own autocheckpoint
# threshold (1,000 pages): a checkpoint copies the pages written more than once only once,
# and the worker thread's share of upload-url's CPU fell from ~8% (every 24) to ~4%
# (docs/benchmarks-journal.md).
CHECKPOINT_EVERY = 64

# How often the loop looks again for this process's writer to end (doubling to the most):
# a checkpoint holds it ~5 ms, a worker thread's write about as long.
_WRITER_POLL = 0.000_25
_WRITER_POLL_MAX = 0.008

T = TypeVar("T")


class WriterBusy(Exception):
    """The write lock was taken: nothing was written. ``here`` when by another thread of
    this process (wait for ``writer_held`` to clear and try again), else by another
    process (run the use case where it may wait: SQLite's busy handler)."""

    def __init__(self, *, here: bool) -> None:
        super().__init__("this process's writer holds the lock" if here else "database is locked")
        self.here = here


class _ThreadWrites(threading.local):
    depth = 0  # writes_now blocks open in this thread
    began = False  # a write session began in the outermost one
    connection: Connection | None = None


class NoWaitWrites:
    """The event loop thread's write sessions on one SQLite engine: a connection each
    thread that asks keeps (out of the pool's count), begun only if the lock is free."""

    def __init__(self, engine: Engine, writers: Any) -> None:
        self._engine = engine
        self._writers = writers  # the Database's RLock: this process's writers queue on it
        self._thread = _ThreadWrites()
        self._kept: list[Connection] = []
        self._lock = threading.Lock()
        self._commits = 0
        self._checkpointing = False

    async def run(self, write: Callable[[], T]) -> T:
        """``write()`` on the event loop's thread inside a ``block`` (``Database.writes_now``),
        once this process's writer lock is free at once; ``WriterBusy`` (``here`` false)
        when another process holds SQLite's, and ``write()`` did nothing. While a thread of
        this process holds the lock, the loop's writes wait for it in turn (first come,
        first written), answering others meanwhile. The loop's writes leave the WAL
        checkpoint to a worker thread, every so often."""
        async with _loop_writers():
            delay = _WRITER_POLL
            while True:
                while self.writer_held():
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, _WRITER_POLL_MAX)
                try:
                    with self.block():
                        result = write()
                except WriterBusy as busy:
                    if busy.here:  # taken since writer_held looked; write() did not run
                        continue
                    raise
                if self.checkpoint_due():
                    asyncio.get_running_loop().run_in_executor(None, self.checkpoint)
                return result

    @property
    def active(self) -> bool:
        """Whether this thread is inside a ``block``."""
        return self._thread.depth > 0

    @contextmanager
    def block(self) -> Iterator[None]:
        """Holds this process's writer lock from the start (WriterBusy if another thread
        has it), so that the use case is not begun only to find it taken at its write."""
        thread = self._thread
        outermost = thread.depth == 0
        if outermost and not self._writers.acquire(blocking=False):
            raise WriterBusy(here=True)
        thread.depth += 1
        try:
            yield
        finally:
            thread.depth -= 1
            if outermost:
                thread.began = False
                self._writers.release()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A write session that begins now or raises WriterBusy; the block's only one (a
        second would make the first's writes happen twice when the use case is run
        again)."""
        with self._turn() as connection:
            try:
                transaction = connection.begin()  # BEGIN IMMEDIATE (the engine's begin hook)
            except exc.OperationalError as error:
                # "database is locked": another process writes. A failed BEGIN leaves the
                # connection's state unsure; the next block makes another.
                self._drop(connection)
                raise WriterBusy(here=False) from error
            try:
                with Session(bind=connection, expire_on_commit=False) as session:
                    yield session
                    session.commit()  # its flush; the transaction is the connection's
                transaction.commit()
            except BaseException:
                if transaction.is_active:
                    transaction.rollback()
                raise

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """As ``session``, a write transaction on the DBAPI connection itself, committed
        when the block ends (``Database.insert_rows``: no Connection or ORM session around
        statements that only insert)."""
        with self._turn() as connection:
            raw = connection.connection.dbapi_connection
            assert isinstance(raw, sqlite3.Connection)
            try:
                raw.execute("BEGIN IMMEDIATE").close()
            except sqlite3.OperationalError as error:
                self._drop(connection)
                raise WriterBusy(here=False) from error
            with committed(raw):
                yield raw

    @contextmanager
    def _turn(self) -> Iterator[Connection]:
        """The block's one write, on this thread's kept connection, holding this process's
        writer lock (WriterBusy if another thread has it); counted when it ends well."""
        thread = self._thread
        if thread.began:
            raise RuntimeError("a writes_now block takes one write session")
        thread.began = True
        if not self._writers.acquire(blocking=False):
            raise WriterBusy(here=True)
        connection: Connection | None = None
        try:
            connection = self._connection()
            yield connection
            with self._lock:
                self._commits += 1
        finally:
            try:
                # Kept out of any pool, nothing else would reset it: an exception between
                # BEGIN and the rollback's reach (an interrupt) would leave it holding
                # SQLite's lock for every writer, until the next BEGIN here failed.
                if connection is not None and not connection.closed:
                    raw = connection.connection.dbapi_connection
                    if raw is not None and raw.in_transaction:
                        self._drop(connection)
            finally:
                self._writers.release()

    def writer_held(self) -> bool:
        """Whether another thread of this process holds the write lock now (a worker
        thread's write, or ``checkpoint``)."""
        if not self._writers.acquire(blocking=False):
            return True
        self._writers.release()
        return False

    def checkpoint_due(self) -> bool:
        """Whether enough commits were made here since the last checkpoint; the caller then
        runs ``checkpoint`` in a worker thread (one at a time)."""
        with self._lock:
            if self._checkpointing or self._commits < CHECKPOINT_EVERY:
                return False
            self._checkpointing, self._commits = True, 0
            return True

    def checkpoint(self) -> None:
        """Copy the log back into the database (PASSIVE: waits for no reader). Twice: the
        bulk while writes go on, then what they added as this process's writer, briefly.
        SQLite starts the log over at the next write only if no frame was added since a
        whole checkpoint; under a steady stream of writes it would otherwise only grow."""
        try:
            self._checkpoint_once()
            with self._writers:
                self._checkpoint_once()
        except Exception:
            # A busy or closing database: the next due checkpoint, or SQLite's own at the
            # next worker thread's commit, copies what this one did not.
            log.warning("a WAL checkpoint was skipped", exc_info=True)
        finally:
            with self._lock:
                self._checkpointing = False

    def _checkpoint_once(self) -> None:
        raw = self._engine.raw_connection()  # no BEGIN: pysqlite's autocommit mode
        try:
            raw.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").close()
        finally:
            raw.close()

    def close(self) -> None:
        with self._lock:
            kept, self._kept = self._kept, []
        for connection in kept:
            _close(connection)

    def _connection(self) -> Connection:
        thread = self._thread
        connection = thread.connection
        if connection is None or connection.closed or connection.invalidated:
            connection = self._engine.connect()
            connection.detach()  # out of the pool's count: closed by close() or _drop
            raw = connection.connection.dbapi_connection
            assert raw is not None
            # On the DBAPI connection: a statement on the Connection would begin (and wait).
            raw.execute("PRAGMA busy_timeout=0").close()
            raw.execute("PRAGMA wal_autocheckpoint=0").close()
            thread.connection = connection
            with self._lock:
                self._kept.append(connection)
        return connection

    def _drop(self, connection: Connection) -> None:
        self._thread.connection = None
        with self._lock:
            if connection in self._kept:
                self._kept.remove(connection)
        _close(connection)


def _loop_writers() -> asyncio.Lock:
    """The running loop's queue of writes (an asyncio lock is its loop's alone)."""
    loop = asyncio.get_running_loop()
    lock = _LOOP_WRITERS.get(loop)
    if lock is None:
        lock = _LOOP_WRITERS[loop] = asyncio.Lock()
    return lock


_LOOP_WRITERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


@contextmanager
def committed(raw: sqlite3.Connection) -> Iterator[None]:
    """The rest of a transaction the caller began on ``raw`` (pysqlite's autocommit mode:
    the BEGIN is ours): committed when the block ends, rolled back if it raises."""
    try:
        yield
        raw.execute("COMMIT").close()
    except BaseException:
        if raw.in_transaction:
            raw.rollback()
        raise


def _close(connection: Connection) -> None:
    """Close a kept connection and its DBAPI connection now (SQLite rolls back what it
    held): a detached connection's ``invalidate`` lets go of the DBAPI connection without
    closing it, which then kept any transaction, and its lock, until garbage collection."""
    raw = None if connection.closed else connection.connection.dbapi_connection
    connection.invalidate()
    connection.close()
    if raw is not None:
        with suppress(Exception):
            raw.close()
