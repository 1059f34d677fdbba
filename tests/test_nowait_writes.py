"""upload-url's write on the event loop's own thread (``Database.writes_now``,
``Database.short_write``): made there only when SQLite's write lock is free at once; when
another connection (another process, to SQLite) holds it, the use case runs in a worker
thread that waits; when another thread of this process does, the loop waits for it without
blocking; either way the loop keeps answering. The loop's commits leave the WAL's
checkpoints to a worker thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.support.envelopes import assert_error
from tests.support.uploading import UPLOAD_URL, record_counts
from tracestore.server import db, uploads
from tracestore.server.app import create_app
from tracestore.server.db import loop_writes
from tracestore.server.db import prepared as reads
from tracestore.server.services import Services

BODY = {
    "name": "nowait",
    "files": [{"name": f"rank_{i}.json", "size": 10, "role": "primary"} for i in range(8)],
    "workloadMetadata": {"shape": {"rankCount": 8}},
}


@pytest.fixture
def sqlite_file(services: Services) -> Path:
    if services.db.dialect != "sqlite":
        pytest.skip("writes on the event loop are a SQLite file's; a server's keep to threads")
    return Path(services.db.url.split("///", 1)[1])


@pytest.fixture
def on_loop(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each upload-url from now on: whether its use case ran on the event loop's thread."""
    seen: list[bool] = []
    start = uploads.start_upload

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:
            seen.append(False)
        return start(*args, **kwargs)

    monkeypatch.setattr(uploads, "start_upload", spy)
    return seen


@pytest.fixture
def locked(sqlite_file: Path) -> Iterator[sqlite3.Connection]:
    """Another connection to the file, as another process would be: it may take the lock."""
    other = sqlite3.connect(sqlite_file, isolation_level=None, check_same_thread=False)
    yield other
    if other.in_transaction:
        other.rollback()
    other.close()


def _tracesets(services: Services) -> int:
    with services.db.session(write=False) as session:
        return int(session.scalar(select(func.count()).select_from(db.Traceset)) or 0)


def test_upload_url_writes_on_the_loop_when_the_lock_is_free(
    sqlite_file: Path, http: TestClient, services: Services, on_loop: list[bool]
) -> None:
    for _ in range(3):
        assert http.post(UPLOAD_URL, json=BODY).status_code == 200
    assert on_loop == [True, True, True]
    assert _tracesets(services) == 3


def test_a_failed_write_on_the_loop_writes_nothing_and_frees_the_lock(
    sqlite_file: Path,
    http: TestClient,
    services: Services,
    on_loop: list[bool],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tracestore.errors import Conflict

    run_many = reads.Prepared.run_many
    inserts: list[str] = []

    def refuse_the_third(prepared: reads.Prepared, cursor: Any, rows: Any) -> None:
        inserts.append(prepared.sql)
        if len(inserts) == 3:
            raise Conflict("refused after two inserts")
        run_many(prepared, cursor, rows)

    before = record_counts(services)
    with monkeypatch.context() as patch:
        patch.setattr(reads.Prepared, "run_many", refuse_the_third)  # inside the transaction
        answer = http.post(UPLOAD_URL, json=BODY)
    assert assert_error(answer, 409, "CONFLICT")["message"] == "refused after two inserts"
    assert [sql.split()[2] for sql in inserts] == ["tracesets", "traceset_files", "upload_sessions"]
    assert record_counts(services) == before  # rolled back
    assert http.post(UPLOAD_URL, json=BODY).status_code == 200  # the lock was given back
    assert on_loop == [True, True]


def test_another_connections_lock_sends_the_write_to_a_thread_and_the_loop_answers(
    services: Services, admin_token: str, on_loop: list[bool], locked: sqlite3.Connection
) -> None:
    app = create_app(services=services)

    async def main() -> tuple[int, float, list[int]]:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {admin_token}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as client:
            locked.execute("BEGIN IMMEDIATE")
            upload = asyncio.create_task(client.post(UPLOAD_URL, json=BODY))
            while len(on_loop) < 2:  # tried on the loop, then again in a thread
                await asyncio.sleep(0.01)
            started = asyncio.get_running_loop().time()
            # While the upload waits for the lock in its thread, the loop answers others.
            answered = []
            for _ in range(5):
                answered.append((await client.get("/healthz")).status_code)
                answered.append((await client.get("/api/v1/tracesets")).status_code)
            waited = asyncio.get_running_loop().time() - started
            assert not upload.done()
            locked.execute("COMMIT")
            return (await upload).status_code, waited, answered

    status, waited, answered = asyncio.run(main())
    assert status == 200
    assert answered == [200] * 10
    assert waited < 5  # not the upload's busy wait (30 s) on the loop
    assert on_loop == [True, False]  # ran again in a worker thread, where it waited
    assert _tracesets(services) == 1  # once, not twice


def test_this_process_writer_in_a_thread_is_waited_for_on_the_loop(
    sqlite_file: Path, services: Services, admin_token: str, on_loop: list[bool]
) -> None:
    """Without blocking the loop, and without sending the write to a thread: that fed on
    itself (each write queued in a thread kept the lock taken for the next)."""
    app = create_app(services=services)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with services.db.session():
            holding.set()
            release.wait(10)

    async def main() -> tuple[int, list[int], bool]:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {admin_token}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as client:
            upload = asyncio.create_task(client.post(UPLOAD_URL, json=BODY))
            await asyncio.sleep(0.2)
            answered = []
            for _ in range(5):
                answered.append((await client.get("/healthz")).status_code)
                answered.append((await client.get("/api/v1/tracesets")).status_code)
            waiting = not upload.done() and on_loop == []  # not begun: the lock is held
            release.set()
            return (await upload).status_code, answered, waiting

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    try:
        status, answered, waiting = asyncio.run(main())
    finally:
        release.set()
        holder.join()
    assert status == 200 and waiting
    assert answered == [200] * 10
    assert on_loop == [True]
    assert _tracesets(services) == 1


def test_a_writes_now_block_takes_one_write_session(sqlite_file: Path, services: Services) -> None:
    with services.db.writes_now():
        with services.db.session():
            pass
        with pytest.raises(RuntimeError, match="one write session"), services.db.session():
            pass
    with services.db.session(), services.db.session():  # outside a block: nested as before
        pass


def test_writes_now_raises_writer_busy_before_any_statement(
    services: Services, locked: sqlite3.Connection
) -> None:
    locked.execute("BEGIN IMMEDIATE")
    try:
        with (
            pytest.raises(loop_writes.WriterBusy),
            services.db.writes_now(),
            services.db.session() as session,
        ):
            session.add(db.Tenant(id="tn_never", name="never", created_at=services.now()))
    finally:
        locked.execute("COMMIT")
    with services.db.writes_now(), services.db.session():  # a new connection, lock free
        pass


@pytest.mark.slow
def test_the_loops_commits_are_checkpointed_by_a_worker_thread(
    sqlite_file: Path, http: TestClient, services: Services, on_loop: list[bool]
) -> None:
    """The loop's connection makes no checkpoint of its own; without the worker thread's,
    the log would only grow (by every upload-url's pages) while nothing else writes."""
    wal = sqlite_file.with_name(sqlite_file.name + "-wal")
    count = 6 * loop_writes.CHECKPOINT_EVERY
    sizes = []
    for _ in range(count):
        assert http.post(UPLOAD_URL, json=BODY).status_code == 200
        sizes.append(wal.stat().st_size)
    # Each on the loop: one that met the checkpoint's hold of the lock waited for it there.
    assert on_loop == [True] * count
    per_write = (sizes[9] - sizes[4]) / 5  # the log's growth a write, before any checkpoint
    assert per_write > 0
    # Checkpointed every CHECKPOINT_EVERY writes, the log restarts from its beginning: it
    # stays near that many writes' pages, far under all of them.
    assert sizes[-1] < 3 * loop_writes.CHECKPOINT_EVERY * per_write < count * per_write


def test_a_write_cut_off_after_begin_leaves_no_transaction_behind(
    sqlite_file: Path, services: Services, locked: sqlite3.Connection
) -> None:
    """An exception between BEGIN and the rollback's reach (an interrupt) used to leave the
    kept connection, which no pool resets, holding SQLite's write lock."""
    kept = services.db.nowait
    assert kept is not None
    with pytest.raises(KeyboardInterrupt), services.db.writes_now(), kept._turn() as connection:
        connection.connection.dbapi_connection.execute("BEGIN IMMEDIATE").close()  # type: ignore[union-attr]
        raise KeyboardInterrupt
    locked.execute("BEGIN IMMEDIATE")  # another writer gets the lock at once ...
    locked.execute("ROLLBACK")
    with services.db.writes_now():  # ... and so does the loop's next write
        services.db.insert_rows([])
