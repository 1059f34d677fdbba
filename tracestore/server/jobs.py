"""Durable background jobs: rows of ``jobs`` that any worker process claims under a lease.

A job is ``queued`` until a worker claims it (``running``, with ``lease_owner`` and
``lease_until``), and ends ``done`` or ``failed`` (its error kept). The worker renews its
lease while it works (``keep_lease``); a job whose lease lapsed (its worker died) is
claimable again, one more attempt counted. Claiming is ``SELECT … FOR UPDATE SKIP LOCKED``
on PostgreSQL, so concurrent workers take different jobs (the lease's updates are
``db.leases``); on SQLite the write transaction
(``BEGIN IMMEDIATE``) makes claims one at a time. Ending a job is conditional on still
holding its lease, so a worker that lost it cannot overwrite the new owner's result:
``finish`` and ``fail`` take the caller's session, and a result written in that session
commits only with the job's end, which records the worker that ran it (``ran_by``). A
lapsed lease also counts one of the job's ``crashes``: a job that kills its process (a bomb
of a trace) would kill every worker it is handed to, so the worker gives it up after
``TRACESTORE_JOB_CRASHES`` of them (``worker.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, delete, exists, or_, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from tracestore.server import db
from tracestore.server.db import leases
from tracestore.server.db.database import Database
from tracestore.server.ids import new_id
from tracestore.server.services import Services

log = logging.getLogger("tracestore.jobs")

INSPECT = "inspect"
TRACE_FILE = "trace_file"  # one stored file read once: inspected and analysed (analysis.py)
ASSEMBLE = "assemble"  # a traceset's census and analysis summary, once its files are read
SWEEP = "sweep"


class LeaseLost(Exception):
    """The job's lease passed to another worker (or the job ended): this one must drop it."""


@dataclass
class ClaimedJob:
    """A job as its current owner holds it."""

    id: str
    kind: str
    subject: str | None
    attempts: int
    owner: str
    error: str | None = None  # the previous attempt's, when there was one
    ended: bool = False
    crashes: int = 0  # attempts whose worker died before ending it (its lease lapsed)


def enqueue(
    session: Session,
    kind: str,
    subject: str | None,
    now: datetime,
    *,
    dedupe_key: str | None = None,
    run_after: datetime | None = None,
) -> bool:
    """Queue a job in the caller's transaction; False when a live job has ``dedupe_key``."""
    return _insert(session, kind, subject, now, dedupe_key, run_after or now, None, None)


def enqueue_claimed(
    session: Session,
    kind: str,
    subject: str | None,
    now: datetime,
    owner: str,
    lease: timedelta,
    *,
    dedupe_key: str | None = None,
) -> ClaimedJob | None:
    """A job recorded as already running under ``owner`` (work the caller does itself, yet
    durably: a worker takes it over if the caller dies); None when one with
    ``dedupe_key`` is live."""
    job_id = new_id("job")
    if not _insert(session, kind, subject, now, dedupe_key, now, owner, now + lease, job_id):
        return None
    return ClaimedJob(id=job_id, kind=kind, subject=subject, attempts=1, owner=owner)


def _insert(
    session: Session,
    kind: str,
    subject: str | None,
    now: datetime,
    dedupe_key: str | None,
    run_after: datetime,
    owner: str | None,
    lease_until: datetime | None,
    job_id: str | None = None,
) -> bool:
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    statement = (
        insert(db.Job)
        .values(
            id=job_id or new_id("job"),
            kind=kind,
            subject=subject,
            dedupe_key=dedupe_key,
            state="running" if owner else "queued",
            attempts=1 if owner else 0,
            lease_owner=owner,
            lease_until=lease_until,
            run_after=run_after,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing()
        .returning(db.Job.id)
    )
    # RETURNING, not rowcount: an ORM session's INSERT reports rowcount -1 on PostgreSQL.
    return session.execute(statement).scalar_one_or_none() is not None


def claimable(now: datetime) -> ColumnElement[bool]:
    """Queued and due, or running under a lease that lapsed."""
    return or_(
        and_(db.Job.state == "queued", db.Job.run_after <= now),
        and_(db.Job.state == "running", db.Job.lease_until < now),
    )


def claim(
    database: Database,
    owner: str,
    now: datetime,
    lease: timedelta,
    kinds: Iterable[str] | None = None,
) -> ClaimedJob | None:
    """Take the next claimable job (of ``kinds``) for ``owner``, or None."""
    condition = claimable(now)
    if kinds is not None:
        condition = and_(condition, db.Job.kind.in_(list(kinds)))
    # An idle worker polls: look first without taking SQLite's write lock.
    with database.session(write=False) as session:
        if not session.scalar(select(exists().where(condition))):
            return None
    with database.session() as session:
        query = select(db.Job).where(condition)
        row = session.scalars(
            query.order_by(db.Job.run_after, db.Job.id).limit(1).with_for_update(skip_locked=True)
        ).first()
        if row is None:
            return None
        error, crashes = row.error, row.crashes or 0
        if row.state == "running":
            error = f"its worker {row.lease_owner} stopped before finishing (the lease lapsed)"
            crashes += 1
        attempts = row.attempts + 1
        # The row is locked (SQLite: the write transaction is ours): the update takes it.
        if not leases.take(
            session,
            db.Job,
            row.id,
            condition,
            owner,
            now + lease,
            state="running",
            updated_at=now,
            attempts=attempts,
            error=error,
            crashes=crashes,
        ):
            return None
        return ClaimedJob(
            id=row.id,
            kind=row.kind,
            subject=row.subject,
            attempts=attempts,
            owner=owner,
            error=error,
            crashes=crashes,
        )


def renew(database: Database, job: ClaimedJob, now: datetime, lease: timedelta) -> bool:
    """Extend the lease; False when ``job.owner`` no longer holds it."""
    return leases.renew(database, db.Job, _held(job), now + lease, updated_at=now)


def finish(
    session: Session, job: ClaimedJob, now: datetime, *, again_at: datetime | None = None
) -> None:
    """End the job as done (or, ``again_at``, queue it afresh for then: a periodic job), in
    the caller's transaction. Raises LeaseLost when its owner no longer holds it."""
    values: dict[str, object]
    if again_at is None:
        values = {"state": "done", "dedupe_key": None, "error": None}
    else:
        values = {"state": "queued", "run_after": again_at, "attempts": 0, "error": None}
    _end(session, job, now, {**values, "ran_by": job.owner})


def fail(
    session: Session,
    job: ClaimedJob,
    now: datetime,
    error: str,
    *,
    retry_at: datetime | None = None,
) -> None:
    """Record ``error``: the job is queued again for ``retry_at``, or (without) failed for
    good. Raises LeaseLost when its owner no longer holds it."""
    if retry_at is None:
        values: dict[str, object] = {"state": "failed", "dedupe_key": None, "error": error}
    else:
        values = {"state": "queued", "run_after": retry_at, "error": error}
    _end(session, job, now, {**values, "ran_by": job.owner})


def release(database: Database, job: ClaimedJob, now: datetime) -> bool:
    """Hand a job back unfinished (its worker is stopping): queued again at once, the
    attempt not counted. False when it was no longer held."""
    with database.session() as session:
        try:
            _end(
                session,
                job,
                now,
                {"state": "queued", "run_after": now, "attempts": max(job.attempts - 1, 0)},
            )
        except LeaseLost:
            return False
        return True


def _end(session: Session, job: ClaimedJob, now: datetime, values: dict[str, object]) -> None:
    result = session.execute(
        update(db.Job)
        .where(_held(job))
        .values(lease_owner=None, lease_until=None, updated_at=now, **values)
        .execution_options(synchronize_session=False)
    )
    if int(result.rowcount) != 1:  # type: ignore[attr-defined]
        raise LeaseLost(f"job {job.id} is no longer held by {job.owner}")
    job.ended = True


def _held(job: ClaimedJob) -> ColumnElement[bool]:
    return leases.held(db.Job, job.id, job.owner, db.Job.state == "running")


def prune_done(database: Database, before: datetime) -> int:
    """Delete jobs that ended ``done`` before ``before`` (failed ones stay, with their
    error, for the operator); how many."""
    with database.session() as session:
        result = session.execute(
            delete(db.Job).where(db.Job.state == "done", db.Job.updated_at < before)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]


@contextmanager
def keep_lease(services: Services, job: ClaimedJob) -> Iterator[threading.Event]:
    """Renew ``job``'s lease every third of it while the block runs; the event it yields
    is set once the lease was lost (the work's result will then be refused)."""
    lease = services.settings.job_lease
    lost = threading.Event()
    done = threading.Event()

    def renew_until_done() -> None:
        while not done.wait(lease.total_seconds() / 3):
            try:
                held = renew(services.db, job, services.now(), lease)
            except Exception:  # the database away for a moment: try again next time
                log.warning("could not renew the lease of job %s", job.id, exc_info=True)
                continue
            if not held:
                log.warning("job %s: lease lost to another worker", job.id)
                lost.set()
                return

    renewer = threading.Thread(target=renew_until_done, name=f"lease-{job.id}", daemon=True)
    renewer.start()
    try:
        yield lost
    finally:
        done.set()
        renewer.join()
