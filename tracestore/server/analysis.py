"""Use case: where each rank's GPU time went (ANALYTICS.md), computed by durable jobs and kept.

A completed traceset's analysis starts ``pending`` (``begin``, in the completing
transaction) and is computed by ``trace_file`` jobs, one per Kineto file, so that every
worker process takes part in a large set, then one ``assemble`` job (``file_jobs.py``):

- a small set (inspected by the completing request, ``inspection.py``) gets a job per
  Kineto file its inspection found (``queue_analysis``), which reads the file again for the
  analysis alone: at most ``INLINE_INSPECTION_BYTES`` of them, and the request's answer does
  not wait for it;
- a larger set gets a job per primary file that inspects it and, a Kineto trace, analyses
  it in the same pass (``new_tap``: the analysis fed inspection's windows).

Each job's end records the file's analysis, or why there is none, and one file fewer to
wait for (``record_file``, in the transaction that ends the job: a worker that lost its
lease records nothing); the last one queues the assembly, which takes each file's rank from
the census and the summary from the files' figures (``assemble``), and the stragglers
from the files' stored collectives, read before the assembly's write (``stragglers.py``).
A file that cannot be analysed fails alone, with its reason.

What is stored is bounded: each file's JSON by its share of ``TRACESTORE_MAX_ANALYSIS_SIZE``
(``file_share``; kernel rows folded at ``KERNEL_ROWS``), and issue 45's detail (per-step
kernel totals, the collectives) compressed within the same share, or not kept. Reading a
stored file is bounded by inspection's budget of decompressed bytes; analysing one by
``TRACESTORE_ANALYSIS_MEMORY``.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from tracestore.analysis import RankTap, analyze_opened
from tracestore.analysis.model import KERNEL_ROWS, RankAnalysis
from tracestore.analysis.stragglers import Verdict, verdict
from tracestore.analysis.summary import (
    RankFigures,
    figures_of,
    figures_summary,
    outcome,
    straggler_members,
)
from tracestore.inspect import FileInspection
from tracestore.server import db, jobs
from tracestore.server.services import Services
from tracestore.server.stored_json import bounded

log = logging.getLogger("tracestore.analysis")

MIN_FILE_SHARE = 64 * 1024  # the least of TRACESTORE_MAX_ANALYSIS_SIZE a file gets
SETTING = "TRACESTORE_MAX_ANALYSIS_SIZE"


def file_subject(traceset_id: str, position: int) -> str:
    """A ``trace_file`` job's subject: the traceset and the file's position in it."""
    return f"{traceset_id}/{position}"


def parse_subject(subject: str | None) -> tuple[str, int]:
    """``file_subject``'s parts."""
    traceset_id, _, position = (subject or "").rpartition("/")
    return traceset_id, int(position)


def begin(session: Session, traceset_id: str, now: datetime, *, files: int, inspects: bool) -> None:
    """The traceset's analysis, pending: ``files`` jobs to wait for, which inspect their
    files too when ``inspects`` (in the completing transaction)."""
    if session.get(db.TracesetAnalysis, traceset_id) is None:
        session.add(
            db.TracesetAnalysis(
                traceset_id=traceset_id,
                status="pending",
                files=files,
                remaining=files,
                inspects=inspects,
                updated_at=now,
            )
        )


def discard(session: Session, traceset_ids: Sequence[str]) -> None:
    """Forget the analyses of ``traceset_ids`` (each file's, the state and summary, the
    searchable medians), so that ``begin`` starts each afresh (in the caller's transaction)."""
    for table in (db.FileAnalysis, db.TracesetAnalysis):
        session.execute(
            delete(table)
            .where(table.traceset_id.in_(traceset_ids))
            .execution_options(synchronize_session=False)
        )
    session.execute(
        update(db.Traceset)
        .where(db.Traceset.id.in_(traceset_ids))
        .values(median_idle_pct=None, median_overlap_pct=None, median_step_time_us=None)
        .execution_options(synchronize_session=False)
    )


def queue_file(session: Session, services: Services, traceset_id: str, position: int) -> None:
    """Queue the ``trace_file`` job of one file (in the caller's transaction)."""
    subject = file_subject(traceset_id, position)
    key = f"{jobs.TRACE_FILE}:{subject}"
    jobs.enqueue(session, jobs.TRACE_FILE, subject, services.now(), dedupe_key=key)


def queue_analysis(
    session: Session,
    services: Services,
    traceset_id: str,
    found: list[tuple[int, FileInspection]],
    by: str = "inspection",
) -> None:
    """After a small set's inspection, in the transaction that records it: a ``trace_file``
    job per Kineto file of ``found`` (position, inspection); one whose inspection failed is
    recorded as not analysed, with that reason (the same bytes would fail again)."""
    now = services.now()
    begin(session, traceset_id, now, files=0, inspects=False)
    state = session.get(db.TracesetAnalysis, traceset_id)
    assert state is not None
    kineto = [(position, result) for position, result in found if result.format == "kineto_json"]
    queued = 0
    for position, result in kineto:
        if result.status == "failed":
            reason = f"not analysed: its inspection failed: {result.reason}"
            _store(session, now, traceset_id, position, result.name, result.rank, None, reason, by)
        else:
            queue_file(session, services, traceset_id, position)
            queued += 1
    state.files = state.remaining = queued
    state.updated_at = now
    if not kineto:
        # No Kineto file: any the inspection found are archive members.
        _settle(state, *outcome(0, 0, holds_kineto(result for _, result in found)), now)
    elif not queued:
        queue_assembly(session, services, traceset_id)


def holds_kineto(found: Iterable[FileInspection]) -> bool:
    """Whether any of the inspected files ``found`` is a Kineto trace, archive members too."""
    return any(
        leaf.format == "kineto_json" for result in found for _, leaf in result.leaves(result.name)
    )


def give_up(session: Session, services: Services, traceset_id: str, reason: str) -> None:
    """The analysis will not be computed (the traceset's inspection was given up)."""
    state = session.get(db.TracesetAnalysis, traceset_id)
    if state is not None and state.status == "pending":
        _settle(state, "failed", reason, services.now())


def _settle(state: db.TracesetAnalysis, status: str, reason: str | None, now: datetime) -> None:
    state.status = status
    state.reason = reason
    state.analyzed_at = now
    state.updated_at = now


def file_share(services: Services, files: int) -> int:
    """What one of a traceset's ``files`` may store: its share of the traceset's
    ``TRACESTORE_MAX_ANALYSIS_SIZE``."""
    return max(services.settings.max_analysis_size // max(files, 1), MIN_FILE_SHARE)


def new_tap(services: Services) -> RankTap:
    """An analysis to hand a file's bytes to as inspection reads them."""
    return RankTap(services.settings.analysis_limits)


def analyse_stored(
    services: Services, sha256: str | None, size: int | None
) -> tuple[RankAnalysis | None, str | None]:
    """The analysis of a stored Kineto trace read for it alone, within inspection's budget
    of decompressed bytes; or None and why not."""
    if sha256 is None:
        return None, "the file has no stored bytes"
    budget = services.settings.inspect_limits.budget(size)
    try:
        return analyze_opened(
            lambda: services.store.open_blob(sha256),
            services.settings.analysis_limits,
            budget=budget,
        )
    except Exception as exc:  # the analysis answers bad bytes with a reason: the store failed
        log.exception("could not read blob %s", sha256)
        return None, f"could not read the stored bytes ({type(exc).__name__})"


def record_file(
    session: Session,
    services: Services,
    traceset_id: str,
    position: int,
    *,
    name: str,
    rank: int | None,
    analysis: RankAnalysis | None,
    reason: str | None,
    by: str,
) -> None:
    """In the transaction that ends a file's job: its analysis (or, with ``reason``, why it
    has none; neither: it is no Kineto trace), and one file fewer for the traceset to wait
    for. The last one queues the assembly."""
    state = session.get(db.TracesetAnalysis, traceset_id)
    if state is None:
        return
    if analysis is not None or reason is not None:
        share = file_share(services, state.files)
        now = services.now()
        _store(session, now, traceset_id, position, name, rank, analysis, reason, by, share)
    left = session.execute(
        update(db.TracesetAnalysis)
        .where(db.TracesetAnalysis.traceset_id == traceset_id)
        .values(remaining=db.TracesetAnalysis.remaining - 1, updated_at=services.now())
        .returning(db.TracesetAnalysis.remaining)
        .execution_options(synchronize_session=False)
    ).scalar_one()
    # Each job's end is its own row update: exactly one of them sees the count reach 0.
    if left == 0:
        queue_assembly(session, services, traceset_id)


def queue_assembly(session: Session, services: Services, traceset_id: str) -> None:
    """Queue the traceset's ``assemble`` job (in the caller's transaction)."""
    key = f"{jobs.ASSEMBLE}:{traceset_id}"
    jobs.enqueue(session, jobs.ASSEMBLE, traceset_id, services.now(), dedupe_key=key)


def _store(
    session: Session,
    now: datetime,
    traceset_id: str,
    position: int,
    name: str,
    rank: int | None,
    analysis: RankAnalysis | None,
    reason: str | None,
    by: str,
    share: int = MIN_FILE_SHARE,
) -> None:
    row = session.get(db.FileAnalysis, (traceset_id, position))
    if row is None:
        row = db.FileAnalysis(traceset_id=traceset_id, position=position)
        session.add(row)
    row.file, row.rank, row.analyzed_by, row.analyzed_at = name, rank, by, now
    row.status = "failed" if analysis is None else "complete"
    row.reason = reason if analysis is None else None
    figures = RankFigures(rank, name, None, None, None, None, None)
    if analysis is not None:
        figures = figures_of(rank, name, analysis)
    row.compute_pct, row.non_compute_pct = figures.compute_pct, figures.non_compute_pct
    row.idle_pct, row.overlap_pct = figures.idle_pct, figures.overlap_pct
    row.step_time_us = figures.step_time_us
    if analysis is None:
        row.analysis_text, row.detail = None, None
        return
    body = bounded(analysis.to_json(KERNEL_ROWS), share, SETTING)
    row.analysis_text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    row.detail = detail_blob(analysis, share)


def detail_blob(analysis: RankAnalysis, limit: int) -> bytes | None:
    """Issue 45's detail of ``analysis`` (``RankAnalysis.detail_text``), zlib-compressed, or
    None when that passes ``limit`` bytes."""
    packer = zlib.compressobj(6)
    pieces: list[bytes] = []
    size = 0
    for text in analysis.detail_text():
        piece = packer.compress(text.encode())
        size += len(piece)
        if size > limit:
            return None
        pieces.append(piece)
    pieces.append(packer.flush())
    return None if size + len(pieces[-1]) > limit else b"".join(pieces)


def stored_detail(blob: bytes | None) -> dict[str, Any] | None:
    """A file's stored detail (``detail_blob``) as JSON, or None when none is kept."""
    return None if blob is None else json.loads(zlib.decompress(blob))


def assemble(
    session: Session,
    services: Services,
    traceset: db.Traceset,
    found: Verdict | None = None,
    kineto_found: bool = False,
) -> None:
    """In the assembling job's ending transaction: each file's rank from the census (a file
    of one rank), the summary from the files' figures and ``found``'s stragglers, the
    traceset's searchable medians. ``kineto_found``: the files' inspections found a Kineto
    trace (``holds_kineto``), which none analysed or failed means inside archives."""
    now = services.now()
    state = session.get(db.TracesetAnalysis, traceset.id)
    if state is None:
        return
    census = session.execute(
        select(db.FileAnalysis, db.TracesetFile.rank_start, db.TracesetFile.rank_end)
        .join(
            db.TracesetFile,
            (db.TracesetFile.traceset_id == db.FileAnalysis.traceset_id)
            & (db.TracesetFile.position == db.FileAnalysis.position),
        )
        .where(db.FileAnalysis.traceset_id == traceset.id)
    ).all()
    analysed: list[RankFigures] = []
    failed = 0
    for row, start, end in census:
        if start is not None and start == end:
            row.rank = start
        if row.status != "complete":
            failed += 1
            continue
        analysed.append(
            RankFigures(
                rank=row.rank,
                file=row.file,
                compute_pct=row.compute_pct,
                non_compute_pct=row.non_compute_pct,
                idle_pct=row.idle_pct,
                overlap_pct=row.overlap_pct,
                step_time_us=row.step_time_us,
            )
        )
    status, reason = outcome(len(analysed), failed, kineto_found)
    _settle(state, status, reason, now)
    summary = None
    if status == "complete":
        summary = {**figures_summary(analysed), **straggler_members(found or verdict([]))}
    state.summary_text = None if summary is None else json.dumps(summary, separators=(",", ":"))
    traceset.median_idle_pct = summary["idlePct"]["median"] if summary else None
    traceset.median_overlap_pct = summary["overlapPct"]["median"] if summary else None
    traceset.median_step_time_us = summary["stepTimeUs"]["median"] if summary else None
