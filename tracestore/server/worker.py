"""The job loop: claim a job, run it under a renewed lease, end it; then the next.

``tracestore worker`` runs one in its own process, and ``tracestore serve`` one in a thread
(unless ``--no-worker``). The kinds: ``inspect`` (a small traceset's inspection, which its
completing request runs unless it died), ``trace_file`` and ``assemble`` (``file_jobs.py``:
each file read once for its inspection and analysis, then the traceset's census and
summary), and the periodic ``sweep``. Every worker keeps the one ``sweep`` job armed, so the sweeper
runs once per interval whatever the number of processes.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from tracestore.server import jobs
from tracestore.server.file_jobs import (
    assemble_traceset,
    give_up_assembly,
    give_up_trace_file,
    read_trace_file,
)
from tracestore.server.inspection import failure_text, give_up_inspection, inspect_traceset
from tracestore.server.jobs import ClaimedJob
from tracestore.server.lifecycle import sweep
from tracestore.server.services import Services

log = logging.getLogger("tracestore.worker")

# How often an idle worker looks for due jobs (a job queued in its own process wakes it).
POLL_SECONDS = 1.0
# How long a stopping worker lets its running job finish before handing it back.
STOP_GRACE_SECONDS = 5.0
# A failed attempt is retried after this many leases times the attempts so far.
RETRY_LEASES = 1
# Done jobs are deleted this long after they ended (failed ones stay, with their error).
DONE_KEPT = timedelta(days=7)


@dataclass(frozen=True)
class JobKind:
    """How to run one kind of job: ``run(services, job, stopping)``; ``give_up`` ends a job
    out of attempts (None: the kind never gives up); a ``periodic`` job is re-armed for its
    next interval whatever happens, and ``drain`` leaves it to its time."""

    run: Callable[[Services, ClaimedJob, Callable[[], bool]], None]
    give_up: Callable[[Services, ClaimedJob, str], None] | None = None
    periodic: bool = False


def _give_up_reason(services: Services, job: ClaimedJob) -> str | None:
    """Why ``job`` must not run again (None: it may): out of attempts, or its worker died
    running it ``TRACESTORE_JOB_CRASHES`` times (it may well be what kills them)."""
    settings = services.settings
    if job.crashes >= settings.job_crashes:
        return (
            f"was given up: its worker died while running it {job.crashes} times (the "
            "process stopped before the job ended: killed, or out of memory); not run again "
            f"(at most {settings.job_crashes}, TRACESTORE_JOB_CRASHES)"
        )
    if job.attempts > settings.job_attempts:
        return f"gave up after {job.attempts - 1} attempts: {job.error or 'unknown error'}"
    return None


def _inspect(services: Services, job: ClaimedJob, stopping: Callable[[], bool]) -> None:
    inspect_traceset(services, job.subject or "", job=job)


def _sweep(services: Services, job: ClaimedJob, stopping: Callable[[], bool]) -> None:
    report = sweep(services, should_stop=stopping)
    if any(report.as_json().values()):
        log.info("sweep: %s", report.as_json())
    jobs.prune_done(services.db, services.now() - DONE_KEPT)
    with services.db.session() as session:
        jobs.finish(session, job, services.now(), again_at=next_sweep(services))


KINDS: Mapping[str, JobKind] = {
    jobs.INSPECT: JobKind(run=_inspect, give_up=give_up_inspection),
    jobs.TRACE_FILE: JobKind(run=read_trace_file, give_up=give_up_trace_file),
    jobs.ASSEMBLE: JobKind(run=assemble_traceset, give_up=give_up_assembly),
    jobs.SWEEP: JobKind(run=_sweep, periodic=True),
}


def next_sweep(services: Services) -> datetime:
    """When the sweep job runs next: an interval from now."""
    return services.now() + services.settings.sweep_interval


def arm_sweep(services: Services) -> None:
    """Make sure the one ``sweep`` job exists (the first worker to start creates it)."""
    now = services.now()
    with services.db.session() as session:
        jobs.enqueue(
            session,
            jobs.SWEEP,
            None,
            now,
            dedupe_key=jobs.SWEEP,
            run_after=now + services.settings.sweep_interval,
        )


class Worker:
    """Claims and runs jobs for this process: in a thread (``start``), or in the caller's
    thread (``run``, ``drain``)."""

    def __init__(self, services: Services, *, kinds: Mapping[str, JobKind] = KINDS) -> None:
        self.services = services
        self.kinds = kinds
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._running: dict[str, ClaimedJob] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # --- the loop ---

    def run(self) -> None:
        """Run jobs until ``stop``; sleeps ``POLL_SECONDS`` (or until woken) when idle."""
        armed = False
        while not self._stop.is_set():
            try:
                if not armed:
                    arm_sweep(self.services)
                    armed = True
                ran = self.run_next()
            except Exception:  # the database away: keep going, a poll later
                log.exception("worker %s: could not claim a job", self.owner)
                ran = False
            if not ran:
                self._wake.wait(POLL_SECONDS)
                self._wake.clear()

    def run_next(self, kinds: list[str] | None = None) -> bool:
        """Claim one due job (of ``kinds``) and run it; False when there was none."""
        services = self.services
        job = jobs.claim(
            services.db, self.owner, services.now(), services.settings.job_lease, kinds
        )
        if job is None:
            return False
        with self._lock:
            self._running[job.id] = job
        try:
            self._execute(job)
        finally:
            with self._lock:
                self._running.pop(job.id, None)
        return True

    def _execute(self, job: ClaimedJob) -> None:
        services = self.services
        kind = self.kinds.get(job.kind)
        try:
            if kind is None:
                with services.db.session() as session:
                    jobs.fail(session, job, services.now(), f"no worker runs {job.kind!r} jobs")
                return
            if kind.give_up is not None and (reason := _give_up_reason(services, job)):
                kind.give_up(services, job, reason)
                log.error("job %s (%s %s): %s", job.id, job.kind, job.subject, reason)
                return
            log.info("job %s (%s %s): attempt %d", job.id, job.kind, job.subject, job.attempts)
            with jobs.keep_lease(services, job):
                kind.run(services, job, self._stop.is_set)
            if not job.ended:
                with services.db.session() as session:
                    jobs.finish(session, job, services.now())
            log.info("job %s (%s %s): done", job.id, job.kind, job.subject)
        except jobs.LeaseLost:
            log.warning(
                "job %s (%s %s) was taken over by another worker", job.id, job.kind, job.subject
            )
        except Exception as exc:
            log.exception("job %s (%s %s) failed", job.id, job.kind, job.subject)
            self._record_failure(job, kind, exc)

    def _record_failure(self, job: ClaimedJob, kind: JobKind | None, exc: Exception) -> None:
        services = self.services
        now = services.now()
        if kind is not None and kind.periodic:
            retry_at = next_sweep(services)
        else:
            retry_at = now + RETRY_LEASES * job.attempts * services.settings.job_lease
        try:
            with services.db.session() as session:
                jobs.fail(session, job, now, failure_text(exc), retry_at=retry_at)
        except jobs.LeaseLost:
            pass
        except Exception:  # the lease lapses and another attempt follows
            log.exception("could not record the failure of job %s", job.id)

    # --- as a thread of this process ---

    def start(self) -> None:
        """Run the loop on a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="tracestore-worker", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def drain(self) -> None:
        """Run every due job other than the sweep here, and wait for this worker's own
        (tests use it through ``Services.wait_for_background``)."""
        others = [kind for kind, spec in self.kinds.items() if not spec.periodic]
        while True:
            if self.run_next(others):
                continue
            with self._lock:
                busy = any(job.kind in others for job in self._running.values())
            if not busy:
                return
            time.sleep(0.02)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Take no more jobs; a job still running after ``grace`` seconds is handed back
        (queued again, the attempt not counted) for another worker."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(grace)
        with self._lock:
            running = list(self._running.values())
        for job in running:
            try:
                if jobs.release(self.services.db, job, self.services.now()):
                    log.warning("handed job %s (%s %s) back", job.id, job.kind, job.subject)
            except Exception:
                log.exception("could not hand job %s back; its lease will lapse", job.id)
