"""Durable jobs (server/jobs.py, server/worker.py): claims, leases, takeover, owner-only
ends, retries and giving up, the one sweep job. On the test database: SQLite, or
PostgreSQL in the PostgreSQL pass (where claims are FOR UPDATE SKIP LOCKED)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.support.clock import FakeClock
from tests.support.uploading import upload
from tests.support.waiting import wait_until
from tracestore.server import db, file_jobs, inspection, jobs
from tracestore.server.app import create_app
from tracestore.server.jobs import ClaimedJob, LeaseLost
from tracestore.server.services import Services
from tracestore.server.worker import KINDS, JobKind, Worker, arm_sweep

LEASE = timedelta(seconds=60)
TRACE = b'{"traceEvents": []}'
ONE_RANK = {"shape": {"rankCount": 1}}


def _queue(services: Services, subject: str = "ts_1", kind: str = "test") -> bool:
    with services.db.session() as session:
        return jobs.enqueue(session, kind, subject, services.now(), dedupe_key=f"{kind}:{subject}")


def _claim(services: Services, owner: str, kinds: list[str] | None = None) -> ClaimedJob | None:
    return jobs.claim(services.db, owner, services.now(), LEASE, kinds)


def _queued_and_claimed(services: Services) -> ClaimedJob:
    """A job queued and claimed by worker ``a``."""
    _queue(services)
    job = _claim(services, "a")
    assert job is not None
    return job


def _taken_over(services: Services, clock: FakeClock) -> tuple[ClaimedJob, ClaimedJob]:
    """A job claimed by ``a``, whose lease lapsed, then claimed by ``b``."""
    first = _queued_and_claimed(services)
    clock.advance(seconds=LEASE.total_seconds() + 1)
    second = _claim(services, "b")
    assert second is not None
    return first, second


def _row(services: Services, job_id: str) -> db.Job:
    with services.db.session(write=False) as session:
        row = session.get(db.Job, job_id)
        assert row is not None
        return row


def test_one_live_job_per_key_and_a_new_one_once_it_ended(services: Services) -> None:
    assert _queue(services)
    assert not _queue(services)  # still queued
    job = _claim(services, "a")
    assert job is not None and job.subject == "ts_1" and job.attempts == 1
    assert not _queue(services)  # running
    with services.db.session() as session:
        jobs.finish(session, job, services.now())
    assert _row(services, job.id).state == "done"
    assert _queue(services)  # ended: the key is free again


def test_a_claimed_job_is_not_claimed_again_while_its_lease_holds(
    services: Services, clock: FakeClock
) -> None:
    _queued_and_claimed(services)
    assert _claim(services, "b") is None
    clock.advance(seconds=59)
    assert _claim(services, "b") is None


def test_a_lapsed_lease_is_taken_over_and_the_old_owner_cannot_end_the_job(
    services: Services, clock: FakeClock
) -> None:
    first, second = _taken_over(services, clock)
    assert second.id == first.id and second.attempts == 2
    assert second.error is not None and "a stopped before finishing" in second.error

    # The first worker comes back: it can neither renew, finish, nor fail the job.
    assert not jobs.renew(services.db, first, services.now(), LEASE)
    with pytest.raises(LeaseLost), services.db.session() as session:
        jobs.finish(session, first, services.now())
    with pytest.raises(LeaseLost), services.db.session() as session:
        jobs.fail(session, first, services.now(), "late")
    assert not jobs.release(services.db, first, services.now())
    assert _row(services, first.id).lease_owner == "b"

    with services.db.session() as session:
        jobs.finish(session, second, services.now())
    assert _row(services, first.id).state == "done"


def test_a_result_written_with_a_lost_lease_is_rolled_back(
    services: Services, clock: FakeClock
) -> None:
    """What a worker records commits only with its job's end (inspection does this)."""
    first, _ = _taken_over(services, clock)
    with pytest.raises(LeaseLost), services.db.session() as session:
        session.add(db.Tenant(id="ten_late", name="written-late", created_at=services.now()))
        jobs.finish(session, first, services.now())
    with services.db.session(write=False) as session:
        assert session.get(db.Tenant, "ten_late") is None


def test_renewing_keeps_the_job(services: Services, clock: FakeClock) -> None:
    job = _queued_and_claimed(services)
    for _ in range(3):
        clock.advance(seconds=40)
        assert jobs.renew(services.db, job, services.now(), LEASE)
        assert _claim(services, "b") is None


def test_a_failed_attempt_is_retried_later_with_its_error_kept(
    services: Services, clock: FakeClock
) -> None:
    job = _queued_and_claimed(services)
    with services.db.session() as session:
        jobs.fail(session, job, services.now(), "boom", retry_at=services.now() + LEASE)
    row = _row(services, job.id)
    assert (row.state, row.error, row.lease_owner) == ("queued", "boom", None)
    assert _claim(services, "b") is None  # not before retry_at
    clock.advance(seconds=61)
    again = _claim(services, "b")
    assert again is not None and again.attempts == 2 and again.error == "boom"


def test_a_released_job_is_claimable_at_once_and_the_attempt_not_counted(
    services: Services,
) -> None:
    job = _queued_and_claimed(services)
    assert jobs.release(services.db, job, services.now())
    again = _claim(services, "b")
    assert again is not None and again.attempts == 1


def test_concurrent_claims_take_each_job_exactly_once(services: Services) -> None:
    for index in range(30):
        _queue(services, subject=f"ts_{index}")
    taken: list[str] = []
    lock = threading.Lock()

    def claimer(owner: str) -> None:
        while True:
            job = _claim(services, owner)
            if job is None:
                return
            with lock:
                taken.append(job.id)

    threads = [threading.Thread(target=claimer, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(taken) == 30 and len(set(taken)) == 30


def test_the_sweep_job_exists_once_and_is_rearmed_after_each_sweep(
    services: Services, clock: FakeClock
) -> None:
    for _ in range(3):  # three workers starting
        arm_sweep(services)
    with services.db.session(write=False) as session:
        sweeps = session.scalars(select(db.Job).where(db.Job.kind == jobs.SWEEP)).all()
    assert len(sweeps) == 1
    worker = Worker(services)
    assert not worker.run_next()  # not due yet
    clock.advance(seconds=services.settings.sweep_interval.total_seconds() + 1)
    assert worker.run_next()
    row = _row(services, sweeps[0].id)
    assert row.state == "queued" and row.attempts == 0
    assert row.run_after == services.now() + services.settings.sweep_interval
    assert not worker.run_next()


def _kinds(run: Callable[[Services, ClaimedJob, Callable[[], bool]], None]) -> dict[str, JobKind]:
    gave_up: list[tuple[str, str]] = []

    def give_up(services: Services, job: ClaimedJob, error: str) -> None:
        gave_up.append((job.id, error))
        with services.db.session() as session:
            jobs.fail(session, job, services.now(), error)

    kinds = dict(KINDS)
    kinds["test"] = JobKind(run=run, give_up=give_up)
    return kinds


def test_a_job_that_keeps_failing_is_given_up_with_its_error(
    services: Services, clock: FakeClock
) -> None:
    def always_fails(services: Services, job: ClaimedJob, stopping: Callable[[], bool]) -> None:
        raise RuntimeError(f"attempt {job.attempts} failed")

    worker = Worker(services, kinds=_kinds(always_fails))
    _queue(services)
    for _ in range(services.settings.job_attempts):
        assert worker.run_next(["test"])
        clock.advance(hours=1)
    assert worker.run_next(["test"])  # out of attempts: given up, not run
    with services.db.session(write=False) as session:
        row = session.scalars(select(db.Job).where(db.Job.kind == "test")).one()
    assert row.state == "failed"
    attempts = services.settings.job_attempts
    assert (
        row.error == f"gave up after {attempts} attempts: RuntimeError: attempt {attempts} failed"
    )
    assert not worker.run_next(["test"])


def test_an_inspection_whose_workers_die_shows_failed_not_pending(
    http: TestClient, services: Services, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspection, "INLINE_INSPECTION_BYTES", 0)
    traceset = upload(http, {"r0.json": (TRACE, "primary")}, ONE_RANK)
    # Every worker that takes the file's job dies mid-read (claims, never renews or ends).
    for attempt in range(services.settings.job_crashes):
        assert _claim(services, f"doomed{attempt}", [jobs.TRACE_FILE]) is not None
        clock.advance(seconds=services.settings.job_lease.total_seconds() + 1)
    services.wait_for_background()
    after: dict[str, Any] = http.get(f"/api/v1/tracesets/{traceset['id']}").json()
    assert after["files"][0]["metadataStatus"] == "failed"
    told = after["inspection"]
    reason = "inspection was given up: its worker died while running it 2 times"
    assert told["status"] == "complete"  # the census of the files that could be read
    (failed,) = told["census"]["failedFiles"]
    assert failed["file"] == "r0.json" and failed["reason"].startswith(reason)
    assert told["files"][0]["reason"].startswith(reason)
    assert after["status"] == "ready"
    analysis = http.get(f"/api/v1/tracesets/{traceset['id']}/analysis").json()
    assert analysis["status"] == "failed"
    (entry,) = analysis["ranks"]
    assert entry["status"] == "failed"
    assert entry["reason"].startswith("analysis was given up: its worker died while running")


def test_a_worker_whose_lease_was_taken_keeps_the_new_owners_result(
    http: TestClient, services: Services, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slow first worker finishes after a second one did: its write is refused."""
    monkeypatch.setattr(inspection, "INLINE_INSPECTION_BYTES", 0)
    traceset = upload(http, {"r0.json": (TRACE, "primary")}, ONE_RANK)
    slow = _claim(services, "slow", [jobs.TRACE_FILE])
    assert slow is not None
    clock.advance(seconds=services.settings.job_lease.total_seconds() + 1)
    services.wait_for_background()  # a second worker takes over and records its result
    first = http.get(f"/api/v1/tracesets/{traceset['id']}").json()["inspection"]
    analysed = http.get(f"/api/v1/tracesets/{traceset['id']}/analysis").text
    clock.advance(seconds=5)
    with pytest.raises(LeaseLost):
        file_jobs.read_trace_file(services, slow, lambda: False)
    assert http.get(f"/api/v1/tracesets/{traceset['id']}").json()["inspection"] == first
    assert http.get(f"/api/v1/tracesets/{traceset['id']}/analysis").text == analysed


def test_the_in_process_worker_thread_runs_queued_jobs(
    services: Services, admin_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspection, "INLINE_INSPECTION_BYTES", 0)
    services.settings = services.settings.model_copy(update={"in_process_worker": True})
    with TestClient(create_app(services=services)) as client:
        client.headers["Authorization"] = f"Bearer {admin_token}"
        traceset = upload(client, {"r0.json": (TRACE, "primary")}, ONE_RANK)
        # The inspection is recorded by the assembly, after the file's.
        answer = wait_until(
            lambda: (
                (got := client.get(f"/api/v1/tracesets/{traceset['id']}").json())["inspection"]
                and got
            ),
            "the worker thread never inspected it",
            20,
        )
    assert answer["inspection"]["status"] == "complete"
    assert services.worker is None  # stopped with the app


def test_a_stopping_worker_hands_its_running_job_back(services: Services) -> None:
    started = threading.Event()
    release = threading.Event()

    def slow(services: Services, job: ClaimedJob, stopping: Callable[[], bool]) -> None:
        started.set()
        release.wait(10)

    worker = Worker(services, kinds=_kinds(slow))
    _queue(services)
    worker.start()
    assert started.wait(10)
    worker.stop(grace=0.1)
    with services.db.session(write=False) as session:
        row = session.scalars(select(db.Job).where(db.Job.kind == "test")).one()
    assert (row.state, row.attempts, row.lease_owner) == ("queued", 0, None)
    release.set()


def test_the_migration_queues_the_inspections_a_dead_process_left_pending(
    http: TestClient, services: Services, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before jobs, a staleness sweep found such tracesets; migration 0006 queues them."""
    from alembic import command
    from alembic.config import Config

    from tracestore.server import completion
    from tracestore.server.db.database import MIGRATIONS_DIR

    monkeypatch.setattr(completion, "run_inspection", lambda *a: None)
    traceset = upload(http, {"r0.json": (TRACE, "primary")}, ONE_RANK)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with services.db.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0005")  # the version before jobs: no job recorded
        command.upgrade(config, "head")
    with services.db.session(write=False) as session:
        queued = session.scalars(select(db.Job).where(db.Job.kind == jobs.INSPECT)).one()
    assert (queued.subject, queued.state) == (traceset["id"], "queued")
    clock.advance(minutes=1)  # the migration queued it at the real time, a little later
    services.wait_for_background()
    after = http.get(f"/api/v1/tracesets/{traceset['id']}").json()
    assert after["files"][0]["metadataStatus"] == "complete"
