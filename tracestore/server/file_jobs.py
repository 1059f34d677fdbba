"""The jobs that read a completed traceset's stored files: one ``trace_file`` job per file,
then one ``assemble`` job for the traceset.

A ``trace_file`` job reads its file once. In a traceset too large to inspect before the
completion answers, it inspects the file and, a Kineto trace, analyses it in the same pass
(the analysis is fed inspection's windows, within inspection's budget of decompressed
bytes); in a small one, which the completing request inspected, it reads a Kineto trace
again for its analysis alone. Its end records what it found (the file's inspection, its
analysis) together with the job's end. The last file's job queues the ``assemble`` job,
which records the traceset's census from its files' inspections (a large traceset's) and
its analysis summary (``analysis.assemble``).

A job given up (out of attempts, or its workers died running it ``TRACESTORE_JOB_CRASHES``
times: a file that kills its reader) records the file as failed with that reason, and still
counts as ended, so the traceset's other files answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import closing

from sqlalchemy import select

from tracestore import schemas
from tracestore.analysis.model import RankAnalysis
from tracestore.inspect import FileInspection, rank_census
from tracestore.inspect.files import sniff_format
from tracestore.inspect.streams import (
    HEAD_SIZE,
    decompressed,
    detect_compression,
    read_up_to,
    rewound,
)
from tracestore.server import analysis, db, inspection, jobs, stragglers
from tracestore.server.jobs import ClaimedJob
from tracestore.server.services import Services
from tracestore.server.stored_json import bounded

log = logging.getLogger("tracestore.file_jobs")


def read_trace_file(services: Services, job: ClaimedJob, stopping: Callable[[], bool]) -> None:
    """Run a ``trace_file`` job: read its file once, record what was found."""
    traceset_id, position = analysis.parse_subject(job.subject)
    with services.db.session(write=False) as session:
        state = session.get(db.TracesetAnalysis, traceset_id)
        file = session.get(db.TracesetFile, (traceset_id, position))
        traceset = session.get(db.Traceset, traceset_id)
        readable = traceset is not None and traceset.status == "ready"
        inspects = state is not None and state.inspects
        primary_files = state.files if state is not None else 1
    if file is None or not readable:  # deleted or expired meanwhile: nothing to read
        with services.db.session() as session:
            jobs.finish(session, job, services.now())
            analysis.record_file(
                session,
                services,
                traceset_id,
                position,
                name="",
                rank=None,
                analysis=None,
                reason=None,
                by=job.owner,
            )
        return
    found: FileInspection | None = None
    result: RankAnalysis | None = None
    reason: str | None = None
    if inspects:
        tap = analysis.new_tap(services)
        found = inspection.inspect_blob(services, file.name, file.sha256, file.size, tap=tap)
        if found.format != "kineto_json" or not tap.fed:
            tap.close()
        elif found.status == "failed":
            tap.close()
            reason = f"not analysed: its inspection failed: {found.reason}"
        else:
            result, reason = tap.finish()
        rank = found.rank
    else:
        result, reason = analysis.analyse_stored(services, file.sha256, file.size)
        rank = _census_rank(file)
    # While a large set is being read, each file keeps its whole inspection for the census
    # (its share of what may be held for it), which the assembly then shortens to its share.
    held = inspection.RESULTS_PER_LIMIT * services.settings.max_inspection_size
    with services.db.session() as session:
        jobs.finish(session, job, services.now())
        if found is not None:
            row = session.get(db.TracesetFile, (traceset_id, position))
            if row is not None:
                row.inspection = bounded(found.to_json(), max(held // primary_files, 64 * 1024))
                row.metadata_status = found.status
                row.metadata_reason = found.reason
        analysis.record_file(
            session,
            services,
            traceset_id,
            position,
            name=file.name,
            rank=rank,
            analysis=result,
            reason=reason,
            by=job.owner,
        )


def _census_rank(file: db.TracesetFile) -> int | None:
    """The file's rank, as the census found it (a file of one rank), else None."""
    return file.rank_start if file.rank_start == file.rank_end else None


def give_up_trace_file(services: Services, job: ClaimedJob, why: str) -> None:
    """End a ``trace_file`` job that may not run again: its file still pending is
    ``failed`` with the reason, and so is its analysis, if it is a Kineto trace."""
    traceset_id, position = analysis.parse_subject(job.subject)
    with services.db.session(write=False) as session:
        state = session.get(db.TracesetAnalysis, traceset_id)
        file = session.get(db.TracesetFile, (traceset_id, position))
        inspects = state is not None and state.inspects
    # A small set's job is queued for Kineto traces only; in a large one, its first bytes
    # tell (the job read no further, or its result would be recorded).
    kineto = file is not None and (not inspects or _looks_kineto(services, file))
    name = file.name if file is not None else ""
    with services.db.session() as session:
        jobs.fail(session, job, services.now(), f"reading {name} {why}")
        if inspects:
            inspection.fail_pending_files(session, traceset_id, f"inspection {why}", position)
        analysis.record_file(
            session,
            services,
            traceset_id,
            position,
            name=name,
            rank=_census_rank(file) if file is not None else None,
            analysis=None,
            reason=f"analysis {why}" if kineto else None,
            by=job.owner,
        )


def _looks_kineto(services: Services, file: db.TracesetFile) -> bool:
    """Whether the stored file's first bytes (decompressed, a little of them) are a Kineto
    trace's."""
    if file.sha256 is None:
        return False
    try:
        with closing(services.store.open_blob(file.sha256)) as raw:
            head = read_up_to(raw, HEAD_SIZE)
            compression = detect_compression(head)
            if compression is not None:
                budget = services.settings.inspect_limits.budget(file.size)
                stream = decompressed(rewound(raw, head, None), compression, budget)
                head = read_up_to(stream, HEAD_SIZE)
    except Exception:  # what killed its readers may break this too: then it is not known
        log.warning("could not read the head of %s", file.name, exc_info=True)
        return False
    return sniff_format(head, file.name) == "kineto_json"


def assemble_traceset(services: Services, job: ClaimedJob, stopping: Callable[[], bool]) -> None:
    """Run an ``assemble`` job: the census of a large traceset from its files' stored
    inspections, and the analysis summary."""
    traceset_id = job.subject or ""
    with services.db.session(write=False) as session:
        state = session.get(db.TracesetAnalysis, traceset_id)
        traceset = session.get(db.Traceset, traceset_id)
        inspects = state is not None and state.inspects and traceset is not None
        declared = traceset.rank_count if traceset is not None else None
        metadata = traceset.workload_metadata if traceset is not None else None
    found = _stored_inspections(services, traceset_id) if inspects else None
    census = None
    if found is not None:
        census = rank_census(found, declared_rank_count=declared, workload_metadata=metadata)
    verdict = stragglers.straggler_verdict(services, traceset_id)
    with services.db.session() as session:
        jobs.finish(session, job, services.now())
        traceset = session.get(db.Traceset, traceset_id)
        if traceset is None:
            return
        if found is not None and census is not None:
            inspection.record_census(session, services, traceset, found, census)
            session.flush()  # the files' rank ranges, which the assembly reads
        kineto_found = found is not None and analysis.holds_kineto(r for _, r in found)
        analysis.assemble(session, services, traceset, verdict, kineto_found)


def _stored_inspections(services: Services, traceset_id: str) -> list[tuple[str, FileInspection]]:
    """The primary files' inspections as their jobs stored them, one read at a time, as many
    as may be held (``inspection.RESULTS_PER_LIMIT``): the rest count as not inspected."""
    limit = services.settings.max_inspection_size
    with services.db.session(write=False) as session:
        files = session.execute(
            select(db.TracesetFile.position, db.TracesetFile.name, db.TracesetFile.metadata_reason)
            .where(db.TracesetFile.traceset_id == traceset_id, db.TracesetFile.role == "primary")
            .order_by(db.TracesetFile.position)
        ).all()
    found: list[tuple[str, FileInspection]] = []
    held = 0
    for position, name, reason in files:
        if held > inspection.RESULTS_PER_LIMIT * limit:
            found.append((name, inspection.not_inspected(name, limit)))
            continue
        with services.db.session(write=False) as session:
            stored = session.scalar(
                select(db.TracesetFile.inspection).where(
                    db.TracesetFile.traceset_id == traceset_id,
                    db.TracesetFile.position == position,
                )
            )
        found.append((name, _rebuilt(name, stored, reason)))
        held += len(json.dumps(stored))
    return found


def _rebuilt(name: str, stored: object, reason: str | None) -> FileInspection:
    if not isinstance(stored, dict):  # its job was given up (``reason``) before it read it
        return FileInspection(name=name, status="failed", reason=reason or "not inspected")
    try:
        return FileInspection.from_json(stored)
    except (KeyError, TypeError, ValueError):  # shortened past what can be read back
        return FileInspection(
            name=name, status="failed", reason="its inspection could not be read back"
        )


def give_up_assembly(services: Services, job: ClaimedJob, why: str) -> None:
    """End an ``assemble`` job that may not run again: the traceset's analysis failed
    with the reason (and its inspection, if that was the assembly's to record)."""
    now = services.now()
    with services.db.session() as session:
        jobs.fail(session, job, now, f"assembly {why}")
        traceset = session.get(db.Traceset, job.subject) if job.subject else None
        if traceset is None:
            return
        if traceset.inspection is None:
            traceset.inspection = {
                "status": "failed",
                "inspectedAt": schemas.format_timestamp(now),
                "reason": f"the census {why}",
                "files": [],
            }
        analysis.give_up(session, services, traceset.id, f"the summary {why}")
