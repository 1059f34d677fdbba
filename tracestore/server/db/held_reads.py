"""Read connections and sessions kept past the block that opened them (``Database``'s
``inline_reads`` and ``shared_reads``): a DBAPI connection the event loop's thread keeps out
of the pool (``HeldReads``), and the read session a request's token check hands to its use
case's first read (``SharedReads``, found through ``SHARED_READS``)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session


class HeldConnection:
    """One thread's kept read connection (a DBAPI connection), closed when the thread's
    state goes (its end) or by ``HeldReads.close_all``; weakly referenced there."""

    __slots__ = ("__weakref__", "busy", "connection")

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.busy = False

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            with suppress(Exception):
                connection.close()

    __del__ = close


class _ThreadReads(threading.local):
    inline = 0  # inline_reads blocks open in this thread
    held: HeldConnection | None = None


class HeldReads:
    """The connections ``Database.inline_reads`` keeps, one per thread that asks: made by
    the read engine's pool (its connect hook's PRAGMAs and functions applied), then
    detached from it. ``close_all`` (``Database.dispose``) closes every thread's; a thread
    makes another at its next read."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._thread = _ThreadReads()
        self._lock = threading.Lock()
        self._every: weakref.WeakSet[HeldConnection] = weakref.WeakSet()

    def inline(self, step: int) -> None:
        self._thread.inline += step

    def take(self) -> HeldConnection | None:
        """This thread's connection for one read block, or None for a pooled one (outside
        ``inline_reads``, or while an outer read block uses it)."""
        thread = self._thread
        if not thread.inline:
            return None
        held = thread.held
        if held is None or held.connection is None:
            fairy = self._engine.raw_connection()
            connection = fairy.dbapi_connection
            fairy.detach()  # the pool makes another in its place; this one is ours to close
            held = thread.held = HeldConnection(connection)
            with self._lock:
                self._every.add(held)
        elif held.busy:
            return None
        held.busy = True
        return held

    def give_back(self, held: HeldConnection, *, ended: bool) -> None:
        """The read block is over; a connection whose read transaction could not be ended
        is closed, and the next read makes another."""
        held.busy = False
        if not ended:
            held.close()

    def close_all(self) -> None:
        with self._lock:
            every = list(self._every)
        for held in every:
            held.close()


class SharedReads:
    """The read session a ``Database.shared_reads`` block hands from one read to the next:
    of ``database`` (the one whose read blocks take part), made by ``sessions``."""

    def __init__(self, database: object, sessions: Callable[[], Session]) -> None:
        self.database = database
        self._sessions = sessions
        self._session: Session | None = None
        self._depth = 0  # read blocks using it now
        self._hand_over = True  # the first read block to end leaves it open for the next

    @property
    def holds_session(self) -> bool:
        return self._session is not None

    @contextmanager
    def session(self) -> Iterator[Session]:
        if self._session is None:
            self._session = self._sessions()
            self._session.begin()
        self._depth += 1
        try:
            yield self._session
        except BaseException:
            self._depth -= 1
            # As a session of its own would have been: rolled back, the next read afresh.
            self.end(failed=True)
            raise
        self._depth -= 1
        if self._depth == 0:
            if self._hand_over:
                self._hand_over = False
            else:
                self.end()

    def end(self, *, failed: bool = False) -> None:
        """End the read transaction unless a read block still uses it."""
        session, self._session = self._session, None
        if session is None:
            return
        if self._depth:
            self._session = session
            return
        try:
            if failed:
                session.rollback()
            else:
                session.commit()
        finally:
            session.close()


SHARED_READS: ContextVar[SharedReads | None] = ContextVar("tracestore_shared_reads", default=None)
