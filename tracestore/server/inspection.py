"""Use case: inspect a completed traceset's primary files and record its rank census.

Small tracesets are inspected inside the completing request, so its answer already carries
the census; larger ones on a background thread. Files stay ``pending`` until read, and the
sweeper re-queues tracesets whose inspection a dead process never finished.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, delete, select
from sqlalchemy.orm import Session

from tracestore import schemas
from tracestore.inspect import (
    FileInspection,
    RankCensus,
    inspect_file,
    rank_census,
    validation_checks,
)
from tracestore.inspect.readiness import readiness, readiness_checks
from tracestore.inspect.summary import search_facts, summary_world_size, traceset_summary
from tracestore.server import db
from tracestore.server.services import Services

log = logging.getLogger("tracestore.inspection")

# Primary bytes up to this size are inspected before completion answers.
INLINE_INSPECTION_BYTES = 64 * 1024 * 1024
# A traceset still pending this long after completion is assumed abandoned and re-queued.
STALE_AFTER = timedelta(minutes=30)


def schedule_inspection(services: Services, traceset_id: str, primary_bytes: int) -> None:
    """Inspect now when small, else on the process's background inspection thread."""
    if primary_bytes <= INLINE_INSPECTION_BYTES:
        inspect_traceset(services, traceset_id)
        return
    services.run_in_background(_inspect_logged, services, traceset_id)


def _inspect_logged(services: Services, traceset_id: str) -> None:
    try:
        inspect_traceset(services, traceset_id)
    except Exception:
        log.exception("inspection of %s failed", traceset_id)


def inspect_traceset(services: Services, traceset_id: str) -> RankCensus | None:
    """Read every primary file, record what each holds, and the traceset's rank census."""
    with services.db.session(write=False) as session:
        traceset = session.get(db.Traceset, traceset_id)
        if traceset is None or traceset.status != "ready":
            return None
        files = [
            (f.position, f.name, f.sha256)
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
    found: list[tuple[str, FileInspection]] = []
    for _, name, sha256 in files:
        found.append((name, _inspect_blob(services, name, sha256)))
    census = rank_census(found, declared_rank_count=declared, workload_metadata=metadata)
    by_name = dict(found)
    with services.db.session() as session:
        traceset = session.get(db.Traceset, traceset_id)
        if traceset is None:
            return census
        for row in session.scalars(
            select(db.TracesetFile).where(
                db.TracesetFile.traceset_id == traceset_id, db.TracesetFile.role == "primary"
            )
        ):
            result = by_name[row.name]
            row.inspection = result.to_json()
            row.metadata_status = result.status
            row.metadata_reason = result.reason
            span = census.rank_ranges.get(row.name)
            row.rank_start, row.rank_end = (span.start, span.end) if span else (None, None)
        view = inspection_view(census, found, services.now())
        traceset.inspection = view
        record_facts(session, traceset, view["summary"])
    return census


def record_facts(session: Session, traceset: db.Traceset, summary: dict[str, Any]) -> None:
    """Replace the traceset's searchable facts with those of ``summary``."""
    session.execute(delete(db.TracesetFact).where(db.TracesetFact.traceset_id == traceset.id))
    session.add_all(
        db.TracesetFact(traceset_id=traceset.id, fact=fact, value=value)
        for fact, value in sorted(search_facts(summary))
    )
    traceset.inspected_world_size = summary_world_size(summary)


def _inspect_blob(services: Services, name: str, sha256: str | None) -> FileInspection:
    if sha256 is None:
        return FileInspection(name=name, status="failed", reason="the file has no stored bytes")
    try:
        return inspect_file(lambda: services.store.open_blob(sha256), name)
    except Exception as exc:  # the readers never raise on bad bytes; this is the store failing
        log.exception("could not read blob %s for %s", sha256, name)
        return FileInspection(
            name=name,
            status="failed",
            reason=f"could not read the stored bytes ({type(exc).__name__})",
        )


def inspection_view(
    census: RankCensus, found: list[tuple[str, FileInspection]], now: datetime
) -> dict[str, Any]:
    """The ``inspection`` member of a traceset: the census and what each file holds."""
    return {
        "status": "complete",
        "inspectedAt": schemas.format_timestamp(now),
        "census": census.to_json(),
        "summary": traceset_summary(found, census),
        "readiness": readiness(found, census),
        "files": [inspection.to_json() for _, inspection in found],
    }


def stored_rank_provenance(traceset: db.Traceset | Row[Any], name: str) -> str | None:
    """Where the recorded census found the ranks of a primary file, or None."""
    inspection = traceset.inspection
    if not isinstance(inspection, dict) or inspection.get("status") != "complete":
        return None
    told = inspection["census"].get("rankProvenance") or {}
    text = told.get(name)
    return text if isinstance(text, str) else None


def stored_census_checks(traceset: db.Traceset) -> list[dict[str, Any]] | None:
    """The census and readiness checks recorded for a traceset as ``validate`` reports them,
    or None when its inspection has not finished."""
    inspection = traceset.inspection
    if not isinstance(inspection, dict) or inspection.get("status") != "complete":
        return None
    recorded = inspection.get("readiness")
    return validation_checks(inspection["census"]) + readiness_checks(
        recorded if isinstance(recorded, dict) else {}
    )


def inspect_abandoned(services: Services) -> int:
    """Re-inspect ready tracesets whose primary files are still pending long after their
    completion (the process inspecting them died). Returns how many were inspected."""
    cutoff = services.now() - STALE_AFTER
    with services.db.session(write=False) as session:
        ids = session.scalars(
            select(db.Traceset.id)
            .distinct()
            .join(db.TracesetFile, db.TracesetFile.traceset_id == db.Traceset.id)
            .where(
                db.Traceset.status == "ready",
                db.Traceset.updated_at < cutoff,
                db.TracesetFile.role == "primary",
                db.TracesetFile.metadata_status == "pending",
            )
            .limit(100)
        ).all()
    for traceset_id in ids:
        _inspect_logged(services, traceset_id)
    return len(ids)
