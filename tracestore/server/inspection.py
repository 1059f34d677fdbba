"""Use case: inspect a completed traceset's primary files and record its rank census.

Every completed traceset gets its inspection queued as jobs (``jobs.py``) in the completing
transaction, with its analysis (``analysis.py``). A small one's is one ``inspect`` job, held
by the completing request, which inspects it before answering, so the answer already
carries the census; its Kineto files are then analysed by ``trace_file`` jobs. A larger
one's files are each read once by a ``trace_file`` job of their own, inspected and analysed
in the same pass, and an ``assemble`` job records the census from their inspections
(``file_jobs.py``): every worker takes part. Either way a process that dies mid-inspection
leaves a job whose lease lapses and another worker takes it over. Files stay ``pending``
until read; a job given up after ``TRACESTORE_JOB_ATTEMPTS`` tries, or after its worker died
``TRACESTORE_JOB_CRASHES`` times running it, marks them ``failed`` with the reason.

What one traceset's inspection may cost is bounded by the settings: each stored file by
``inspect.Limits`` (decompressed bytes, members per archive), the results held while the
set is read by ``RESULTS_PER_LIMIT`` times ``TRACESTORE_MAX_INSPECTION_SIZE`` (files past
it are recorded as not inspected), and what is stored by that size itself (``bounded``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, delete, literal_column, select
from sqlalchemy.orm import Session

from tracestore import schemas
from tracestore.inspect import (
    FileInspection,
    RankCensus,
    inspect_file,
    rank_census,
    validation_checks,
)
from tracestore.inspect.census import CENSUS_FACT, MISSING_RANKS_FACT, census_facts
from tracestore.inspect.jsonscan import Tap
from tracestore.inspect.readiness import readiness, readiness_checks
from tracestore.inspect.summary import (
    MAX_DISTINCT_VALUES,
    search_facts,
    summary_world_size,
    traceset_summary,
)
from tracestore.server import analysis, db, jobs
from tracestore.server.jobs import ClaimedJob
from tracestore.server.services import Services
from tracestore.server.stored_json import bounded

log = logging.getLogger("tracestore.inspection")

# Primary bytes up to this size are inspected before completion answers.
INLINE_INSPECTION_BYTES = 64 * 1024 * 1024
# Files' results held while a traceset is read, in times TRACESTORE_MAX_INSPECTION_SIZE.
RESULTS_PER_LIMIT = 4


def queue_inspection(
    session: Session,
    services: Services,
    traceset_id: str,
    primary_bytes: int,
    *,
    held: bool = True,
) -> ClaimedJob | None:
    """Record the traceset's inspection jobs in the caller's (completing) transaction; for a
    small traceset the one job is held by the caller, who inspects it (``run_inspection``),
    or, not ``held``, queued for the workers; a larger one gets a ``trace_file`` job per
    primary file."""
    now = services.now()
    if primary_bytes <= INLINE_INSPECTION_BYTES:
        analysis.begin(session, traceset_id, now, files=0, inspects=False)
        key = f"{jobs.INSPECT}:{traceset_id}"
        if not held:
            jobs.enqueue(session, jobs.INSPECT, traceset_id, now, dedupe_key=key)
            return None
        owner = f"request:{secrets.token_hex(8)}"
        lease = services.settings.job_lease
        return jobs.enqueue_claimed(
            session, jobs.INSPECT, traceset_id, now, owner, lease, dedupe_key=key
        )
    positions = list(
        session.scalars(
            select(db.TracesetFile.position)
            .where(db.TracesetFile.traceset_id == traceset_id, db.TracesetFile.role == "primary")
            .order_by(db.TracesetFile.position)
        )
    )
    analysis.begin(session, traceset_id, now, files=len(positions), inspects=True)
    for position in positions:
        analysis.queue_file(session, services, traceset_id, position)
    return None


def run_inspection(services: Services, job: ClaimedJob | None) -> None:
    """After the commit: inspect now when the caller holds the job, else tell this
    process's worker (if any) there is work; a worker anywhere finds it in any case."""
    if job is None:
        services.wake_worker()
        return
    try:
        with jobs.keep_lease(services, job):
            inspect_traceset(services, job.subject or "", job=job)
        services.wake_worker()  # its analysis jobs
    except jobs.LeaseLost:
        log.warning("inspection of %s was taken over by a worker", job.subject)
    except Exception as exc:
        # Left to the workers: retried, then given up with this error.
        log.exception("inspection of %s failed; a worker will retry it", job.subject)
        retry_at = services.now() + services.settings.job_lease
        with contextlib.suppress(jobs.LeaseLost), services.db.session() as session:
            jobs.fail(session, job, services.now(), failure_text(exc), retry_at=retry_at)
        services.wake_worker()


def failure_text(exc: BaseException) -> str:
    """What a failed job records: the exception's type and first line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def inspect_traceset(
    services: Services, traceset_id: str, *, job: ClaimedJob | None = None
) -> RankCensus | None:
    """Read every primary file, record what each holds, and the traceset's rank census;
    queue the analysis of its Kineto files. With ``job``, the result is recorded only
    together with the job's end, and not at all (LeaseLost) when the job's lease passed to
    another worker meanwhile."""
    with services.db.session(write=False) as session:
        traceset = session.get(db.Traceset, traceset_id)
        gone = traceset is None or traceset.status != "ready"
    if gone or traceset is None:  # deleted or expired meanwhile: nothing to inspect
        if job is not None:
            with services.db.session() as session:
                jobs.finish(session, job, services.now())
        return None
    with services.db.session(write=False) as session:
        files = [
            (f.position, f.name, f.sha256, f.size)
            for f in session.scalars(
                select(db.TracesetFile)
                .where(
                    db.TracesetFile.traceset_id == traceset_id, db.TracesetFile.role == "primary"
                )
                .order_by(db.TracesetFile.position)
            )
        ]
        declared = traceset.rank_count
        metadata = traceset.workload_metadata
    settings = services.settings
    found: list[tuple[str, FileInspection]] = []
    held = 0  # bytes of the results so far, as JSON
    for _, name, sha256, size in files:
        if held > RESULTS_PER_LIMIT * settings.max_inspection_size:
            result = not_inspected(name, settings.max_inspection_size)
        else:
            result = inspect_blob(services, name, sha256, size)
            held += len(json.dumps(result.to_json()))
        found.append((name, result))
    census = rank_census(found, declared_rank_count=declared, workload_metadata=metadata)
    with services.db.session() as session:
        if job is not None:
            jobs.finish(session, job, services.now())
        traceset = session.get(db.Traceset, traceset_id)
        if traceset is None:
            return census
        record_census(session, services, traceset, found, census)
        analysis.queue_analysis(
            session,
            services,
            traceset_id,
            [(position, result) for (position, *_), (_, result) in zip(files, found, strict=True)],
        )
    return census


def not_inspected(name: str, limit: int) -> FileInspection:
    """A file left unread: the results of its traceset's files before it passed what may be
    held (``RESULTS_PER_LIMIT`` times ``TRACESTORE_MAX_INSPECTION_SIZE``)."""
    return FileInspection(
        name=name,
        status="failed",
        reason=f"not inspected: the results of this traceset's files passed "
        f"{RESULTS_PER_LIMIT} times its {limit:,} bytes of inspection "
        "(TRACESTORE_MAX_INSPECTION_SIZE)",
    )


def record_census(
    session: Session,
    services: Services,
    traceset: db.Traceset,
    found: list[tuple[str, FileInspection]],
    census: RankCensus,
) -> None:
    """Record what each primary file holds (``found``, by name) and the traceset's rank
    census, summary and searchable facts, in the caller's transaction."""
    settings = services.settings
    by_name = dict(found)
    per_file = max(settings.max_inspection_size // max(len(found), 1), 4096)
    for row in session.scalars(
        select(db.TracesetFile).where(
            db.TracesetFile.traceset_id == traceset.id, db.TracesetFile.role == "primary"
        )
    ):
        result = by_name[row.name]
        row.inspection = bounded(result.to_json(), per_file)
        row.metadata_status = result.status
        row.metadata_reason = result.reason
        span = census.rank_ranges.get(row.name)
        row.rank_start, row.rank_end = (span.start, span.end) if span else (None, None)
        told = census.rank_provenance.get(row.name)
        row.rank_provenance = told if isinstance(told, str) else None
    limit = settings.inspection_distinct_values
    view = inspection_view(census, found, services.now(), max_values=limit)
    record_facts(session, traceset, view["summary"], max_values=limit, census=view["census"])
    traceset.inspection = bounded(view, settings.max_inspection_size)


def record_facts(
    session: Session,
    traceset: db.Traceset,
    summary: dict[str, Any],
    *,
    max_values: int = MAX_DISTINCT_VALUES,
    census: dict[str, Any] | None = None,
) -> None:
    """Replace the traceset's searchable facts with those of ``summary`` (at most
    ``max_values`` values per fact, and as many GPU-model words) and of its ``census``
    (its verdict and missing ranks: ``census_facts``)."""
    facts = search_facts(summary, max_values=max_values)
    if census is not None:
        facts |= census_facts(census)
    session.execute(delete(db.TracesetFact).where(db.TracesetFact.traceset_id == traceset.id))
    session.add_all(
        db.TracesetFact(traceset_id=traceset.id, fact=fact, value=value)
        for fact, value in sorted(facts)
    )
    traceset.inspected_world_size = summary_world_size(summary)


def census_columns(traceset_id: Any, dialect: str) -> list[ColumnElement[Any]]:
    """The recorded census verdict (``census``) and missing ranks (``census_missing``, as
    text) of the traceset whose id is ``traceset_id``, as two scalar subqueries: a list
    page's rows or one GET read them through the facts' traceset index. On SQLite the fact
    is compared as ``+fact``, which no index answers: its planner, without statistics, took
    the primary key's (fact, ...) prefix and walked every traceset's census."""
    F = db.TracesetFact
    fact: Any = F.fact if dialect == "postgresql" else literal_column("+traceset_facts.fact")
    return [
        select(F.value)
        .where(F.traceset_id == traceset_id, fact == name)
        .limit(1)
        .scalar_subquery()
        .label(label)
        for name, label in ((CENSUS_FACT, "census"), (MISSING_RANKS_FACT, "census_missing"))
    ]


def census_answer(verdict: str | None, missing: str | None) -> dict[str, Any]:
    """The ``census`` and ``missingRanks`` members of a traceset's answer (a list item's
    too) from ``census_columns``: ``unknown`` and null until inspection has recorded it."""
    if verdict not in ("pass", "fail"):
        return {"census": "unknown", "missingRanks": None}
    return {"census": verdict, "missingRanks": int(missing) if missing and missing.isdigit() else 0}


def inspect_blob(
    services: Services,
    name: str,
    sha256: str | None,
    size: int | None,
    tap: Tap | None = None,
) -> FileInspection:
    """The inspection of one stored file (``tap``: handed a Kineto trace's bytes as they are
    read); a store that cannot be read is a failed inspection, not an exception."""
    if sha256 is None:
        return FileInspection(name=name, status="failed", reason="the file has no stored bytes")
    limits = services.settings.inspect_limits
    try:
        return inspect_file(
            lambda: services.store.open_blob(sha256),
            name,
            limits=limits,
            stored_size=size,
            tap=tap,
        )
    except Exception as exc:  # the readers never raise on bad bytes; this is the store failing
        log.exception("could not read blob %s for %s", sha256, name)
        return FileInspection(
            name=name,
            status="failed",
            reason=f"could not read the stored bytes ({type(exc).__name__})",
        )


def inspection_view(
    census: RankCensus,
    found: list[tuple[str, FileInspection]],
    now: datetime,
    *,
    max_values: int = MAX_DISTINCT_VALUES,
) -> dict[str, Any]:
    """The ``inspection`` member of a traceset: the census and what each file holds (the
    summary's distinct values cut at ``max_values``)."""
    return {
        "status": "complete",
        "inspectedAt": schemas.format_timestamp(now),
        "census": census.to_json(),
        "summary": traceset_summary(found, census, max_values=max_values),
        "readiness": readiness(found, census),
        "files": [inspection.to_json() for _, inspection in found],
    }


def _complete_inspection(traceset: db.Traceset) -> dict[str, Any] | None:
    inspection = traceset.inspection
    if not isinstance(inspection, dict) or inspection.get("status") != "complete":
        return None
    return inspection


def stored_census_checks(traceset: db.Traceset) -> list[dict[str, Any]] | None:
    """The census checks recorded for a traceset as ``validate`` reports them, or None when
    its inspection has not finished."""
    inspection = _complete_inspection(traceset)
    return None if inspection is None else validation_checks(inspection["census"])


def stored_readiness(traceset: db.Traceset) -> list[dict[str, Any]]:
    """Which tools can read the traceset, as ``validate`` reports it (``ready`` null for
    each when its inspection has not finished)."""
    inspection = _complete_inspection(traceset) or {}
    recorded = inspection.get("readiness")
    return readiness_checks(recorded if isinstance(recorded, dict) else {})


def give_up_inspection(services: Services, job: ClaimedJob, why: str) -> None:
    """End an inspection job that may not run again (``why``: out of attempts, or its
    workers died running it): its files still pending become ``failed`` with the reason,
    so the traceset does not stay pending; nor does its analysis, which never started."""
    now = services.now()
    reason = f"inspection {why}"
    with services.db.session() as session:
        jobs.fail(session, job, now, reason)
        traceset = session.get(db.Traceset, job.subject) if job.subject else None
        if traceset is None:
            return
        pending = fail_pending_files(session, traceset.id, reason)
        if traceset.inspection is None:
            traceset.inspection = {
                "status": "failed",
                "inspectedAt": schemas.format_timestamp(now),
                "reason": reason,
                "files": [{"name": f.name, "status": "failed", "reason": reason} for f in pending],
            }
        analysis.give_up(session, services, traceset.id, f"not analysed: {reason}")


def fail_pending_files(
    session: Session, traceset_id: str, reason: str, position: int | None = None
) -> list[db.TracesetFile]:
    """Mark the traceset's primary files still pending (or the one at ``position``, if it
    still is) ``failed`` with ``reason``; those rows."""
    query = select(db.TracesetFile).where(
        db.TracesetFile.traceset_id == traceset_id,
        db.TracesetFile.role == "primary",
        db.TracesetFile.metadata_status == "pending",
    )
    if position is not None:
        query = query.where(db.TracesetFile.position == position)
    pending = session.scalars(query).all()
    for row in pending:
        row.metadata_status = "failed"
        row.metadata_reason = reason
    return list(pending)
