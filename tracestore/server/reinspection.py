"""Use case: inspect stored tracesets again (``tracestore reinspect``).

A traceset inspected by an older version keeps what that version recorded: no census
verdict, no searchable facts, no analysis. Inspecting it again first puts it back as a
traceset just completed would be (its primary files ``pending``, its inspection, facts and
analysis gone: the new results replace them, never add to them), then queues the jobs a
completion queues for its size (``inspection.queue_inspection``), none held: the workers
run them. A traceset whose analysis is still pending (its jobs queued or running, queued by
an earlier run of the command too) is left to them, and the jobs' dedupe keys keep two
commands at once from queuing any twice. ``--missing`` pages through the tracesets by id,
``BATCH`` a transaction, so that a million of them hold neither memory nor a transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, null, select, update
from sqlalchemy.orm import Session

from tracestore.errors import Conflict, NotFound
from tracestore.server import analysis, db, inspection
from tracestore.server.services import Services

BATCH = 1000


@dataclass
class Reinspected:
    """What a run queued: ``queued`` tracesets, and ``under_way`` ones left to the jobs
    already queued or running for them."""

    queued: int = 0
    under_way: int = 0

    def as_json(self) -> dict[str, int]:
        return {"queued": self.queued, "underWay": self.under_way}


def reinspect(services: Services, traceset_ids: Sequence[str]) -> Reinspected:
    """Queue the inspection and analysis of ``traceset_ids`` again. Before queuing any:
    NotFound naming the first unknown id, Conflict the first that is not ready."""
    unique = list(dict.fromkeys(traceset_ids))
    batches = [unique[start : start + BATCH] for start in range(0, len(unique), BATCH)]
    for batch in batches:
        with services.db.session(write=False) as session:
            rows = session.execute(
                select(db.Traceset.id, db.Traceset.status).where(db.Traceset.id.in_(batch))
            )
            statuses = {traceset_id: status for traceset_id, status in rows}
        for traceset_id in batch:
            status = statuses.get(traceset_id)
            if status is None:
                raise NotFound(f"Traceset '{traceset_id}' not found")
            if status != "ready":
                raise Conflict(
                    f"Traceset '{traceset_id}' is {status}: only a ready traceset is "
                    "inspected again"
                )
    report = Reinspected()
    for batch in batches:
        with services.db.session() as session:
            _queue(session, services, batch, report)
    services.wake_worker()
    return report


def reinspect_missing(services: Services, batch: int = BATCH) -> Reinspected:
    """Queue the inspection and analysis of every ready traceset with no census verdict
    recorded, ``batch`` tracesets a transaction."""
    report = Reinspected()
    after = ""
    while True:
        with services.db.session() as session:
            dialect = session.get_bind().dialect.name
            verdict = inspection.census_columns(db.Traceset.id, dialect)[0]
            ids = list(
                session.scalars(
                    select(db.Traceset.id)
                    .where(db.Traceset.status == "ready", db.Traceset.id > after)
                    .where(verdict.is_(None))
                    .order_by(db.Traceset.id)
                    .limit(batch)
                )
            )
            if not ids:
                break
            _queue(session, services, ids, report)
        after = ids[-1]
    services.wake_worker()
    return report


def _queue(
    session: Session, services: Services, traceset_ids: Sequence[str], report: Reinspected
) -> None:
    """Reset and queue those of ``traceset_ids`` still ready (locked against a delete)
    whose analysis is not pending, in the caller's transaction."""
    ready = set(
        session.scalars(
            select(db.Traceset.id)
            .where(db.Traceset.id.in_(traceset_ids), db.Traceset.status == "ready")
            .with_for_update()
        )
    )
    under_way = set(
        session.scalars(
            select(db.TracesetAnalysis.traceset_id).where(
                db.TracesetAnalysis.traceset_id.in_(ready),
                db.TracesetAnalysis.status == "pending",
            )
        )
    )
    chosen = sorted(ready - under_way)
    report.under_way += len(under_way)
    if not chosen:
        return
    _forget_inspections(session, chosen)
    analysis.discard(session, chosen)
    primary = db.TracesetFile.role == "primary"
    rows = session.execute(
        select(db.TracesetFile.traceset_id, func.sum(db.TracesetFile.size))
        .where(db.TracesetFile.traceset_id.in_(chosen), primary)
        .group_by(db.TracesetFile.traceset_id)
    )
    sizes = {traceset_id: int(size or 0) for traceset_id, size in rows}
    for traceset_id in chosen:
        primary_bytes = sizes.get(traceset_id, 0)
        inspection.queue_inspection(session, services, traceset_id, primary_bytes, held=False)
    report.queued += len(chosen)


def _forget_inspections(session: Session, traceset_ids: Sequence[str]) -> None:
    """The tracesets' inspections as before their first: primary files pending, no census,
    summary or searchable facts."""
    session.execute(
        update(db.TracesetFile)
        .where(db.TracesetFile.traceset_id.in_(traceset_ids), db.TracesetFile.role == "primary")
        .values(
            metadata_status="pending",
            metadata_reason=None,
            inspection=null(),
            rank_start=None,
            rank_end=None,
            rank_provenance=None,
        )
        .execution_options(synchronize_session=False)
    )
    session.execute(
        delete(db.TracesetFact)
        .where(db.TracesetFact.traceset_id.in_(traceset_ids))
        .execution_options(synchronize_session=False)
    )
    session.execute(
        update(db.Traceset)
        .where(db.Traceset.id.in_(traceset_ids))
        .values(inspection=null(), inspected_world_size=None)
        .execution_options(synchronize_session=False)
    )
