"""Time passing: TTL reset on use, and the sweeper (expiry, failed sessions, blob purge),
run as the periodic ``sweep`` job by whichever worker claims it (``worker.py``).

Every change the sweeper makes is a conditional UPDATE or DELETE that re-states the
condition it selected on, so when several sweepers (server processes, ``tracestore gc``) run
at once the database decides which one acts and the others change nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic.alias_generators import to_camel
from sqlalchemy import ColumnElement, and_, delete, exists, or_, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session

from tracestore import schemas
from tracestore.errors import Gone
from tracestore.server import db
from tracestore.server.ids import created_at
from tracestore.server.services import Services
from tracestore.server.storage.blobs import StagedFile, StagingArea
from tracestore.server.tracesets import files_of, mark_unreferenced_blobs
from tracestore.server.upload_sessions import staged_file

log = logging.getLogger("tracestore.sweeper")

BATCH = 200
EXPIRING_STATUSES = ("ready", "upload_failed")
IN_FLIGHT = ("open", "completing")
FINISHED = ("completed", "failed", "expired")
# Staging with no session row is an orphan once this old (by its upload id): far longer
# than start_upload takes to stage files and commit.
ORPHAN_GRACE = timedelta(hours=1)


# --- TTL ---


def record_use(session: Session, traceset: db.Traceset, now: datetime) -> None:
    """A download or resolve: ``expiresAt`` becomes now + ttlDays (promoted ones stay null).

    A traceset already past its ``expiresAt`` is not revived: it answers 410 until the
    sweeper deletes it, so what expires does not depend on when the sweeper last ran.
    """
    if traceset.expires_at is None:
        return
    if traceset.expires_at <= now:
        raise Gone(
            f"Traceset '{traceset.id}' expired at {schemas.format_timestamp(traceset.expires_at)}"
        )
    session.execute(
        update(db.Traceset)
        .where(
            db.Traceset.id == traceset.id,
            db.Traceset.expires_at.is_not(None),
            db.Traceset.expires_at > now,
        )
        .values(expires_at=now + timedelta(days=traceset.ttl_days))
    )


# --- the sweeper ---


@dataclass
class SweepReport:
    """What one sweep changed (counts of what *this* sweeper did, not what it saw)."""

    expired_tracesets: int = 0
    failed_sessions: int = 0
    purged_blobs: int = 0
    purged_bytes: int = 0
    cleaned_staging: int = 0
    purge_deferred: bool = False

    def as_json(self) -> dict[str, Any]:
        return {to_camel(key): value for key, value in asdict(self).items()}


def sweep(services: Services, *, should_stop: Callable[[], bool] = lambda: False) -> SweepReport:
    """One pass: expire tracesets, fail expired upload sessions, clean leftover staging and
    purge unreferenced blobs."""
    now = services.now()
    expired = expire_tracesets(services, now, should_stop)
    failed = expire_sessions(services, now, should_stop)
    cleaned = clean_leftover_staging(services, now)
    purged, freed, deferred = purge_blobs(services, now, should_stop)
    return SweepReport(
        expired_tracesets=expired,
        failed_sessions=failed,
        purged_blobs=purged,
        purged_bytes=freed,
        cleaned_staging=cleaned,
        purge_deferred=deferred,
    )


def expire_tracesets(
    services: Services, now: datetime, should_stop: Callable[[], bool] = lambda: False
) -> int:
    """Soft-delete tracesets whose ``expiresAt`` has passed; their blobs become purgeable."""
    is_expired = and_(
        db.Traceset.status.in_(EXPIRING_STATUSES),
        db.Traceset.expires_at.is_not(None),
        db.Traceset.expires_at <= now,
    )
    done = 0
    for traceset_id in _unseen_ids(services, db.Traceset.id, is_expired, should_stop):
        with services.db.session() as session:
            result = session.execute(
                update(db.Traceset)
                .where(db.Traceset.id == traceset_id, is_expired)
                .values(status="deleted", deleted_at=now, updated_at=now)
            )
            if _rowcount(result) == 1:
                mark_unreferenced_blobs(session, traceset_id, now)
                done += 1
    return done


def expire_sessions(
    services: Services, now: datetime, should_stop: Callable[[], bool] = lambda: False
) -> int:
    """Upload sessions past their expiry end: state ``expired``, traceset ``upload_failed``,
    partial bytes removed. A completion holding a live lease is left to finish."""
    is_expired = and_(
        db.UploadSession.expires_at <= now,
        or_(
            db.UploadSession.state == "open",
            and_(
                db.UploadSession.state == "completing",
                or_(db.UploadSession.lease_until.is_(None), db.UploadSession.lease_until < now),
            ),
        ),
    )
    done = 0
    for upload_id in _unseen_ids(services, db.UploadSession.id, is_expired, should_stop):
        stages: list[StagedFile] = []
        with services.db.session() as session:
            result = session.execute(
                update(db.UploadSession)
                .where(db.UploadSession.id == upload_id, is_expired)
                .values(state="expired", lease_owner=None, lease_until=None)
            )
            if _rowcount(result) != 1:
                continue
            upload = session.get(db.UploadSession, upload_id)
            assert upload is not None
            session.execute(
                update(db.Traceset)
                .where(db.Traceset.id == upload.traceset_id, db.Traceset.status == "uploading")
                .values(status="upload_failed", updated_at=now)
            )
            stages = [staged_file(upload, f) for f in files_of(session, upload.traceset_id)]
            done += 1
        # Bytes go after the commit: no store call runs while the write lock is held.
        services.store.discard_staging(stages)
    return done


def clean_leftover_staging(services: Services, now: datetime) -> int:
    """Staged parts left behind by a finished session (a process stopped before it removed
    them), and orphans: staging of an upload the database never recorded (``start_upload``
    stages before it commits; a process killed in between), once past ``ORPHAN_GRACE``."""
    staging: StagingArea = services.store
    cleaned = 0
    for upload_id in list(staging.staged_uploads()):
        with services.db.session(write=False) as session:
            upload = session.get(db.UploadSession, upload_id)
            if upload is None:
                started = created_at(upload_id)
                # An upload still being started has no row yet either: leave it its time.
                if started is None or now - started < ORPHAN_GRACE:
                    continue
                stages = None
            elif upload.state in FINISHED:
                stages = [staged_file(upload, f) for f in files_of(session, upload.traceset_id)]
            else:
                continue
        if stages is None:
            staging.discard_upload(upload_id)
        else:
            staging.discard_staging(stages)
        cleaned += 1
    return cleaned


def purge_blobs(
    services: Services, now: datetime, should_stop: Callable[[], bool] = lambda: False
) -> tuple[int, int, bool]:
    """Delete blobs unreferenced for longer than the grace period.

    A blob survives while a live (not deleted) traceset's file uses it, while an in-flight
    upload session declared its SHA-256, and while any completion holds a live lease (a
    completion may have found the blob already stored and be about to link it). Answers
    (blobs purged, bytes freed, whether purging was deferred for a running completion).
    """
    cutoff = now - services.settings.purge_grace
    purgeable = and_(db.Blob.unreferenced_since.is_not(None), db.Blob.unreferenced_since <= cutoff)
    purged = 0
    freed = 0
    for sha256 in _unseen_ids(services, db.Blob.sha256, purgeable, should_stop):
        with services.db.session() as session:
            blob = session.scalars(
                select(db.Blob).where(db.Blob.sha256 == sha256, purgeable).with_for_update()
            ).first()
            if blob is None:
                continue
            if _completion_running(session, now):
                return purged, freed, True
            if _live_reference(session, sha256):
                blob.unreferenced_since = None
                continue
            if _declared_by_upload(session, sha256):
                continue
            # Deleted tracesets keep their file rows; they stop naming bytes that are gone.
            session.execute(
                update(db.TracesetFile).where(db.TracesetFile.sha256 == sha256).values(sha256=None)
            )
            session.execute(delete(db.Blob).where(db.Blob.sha256 == sha256))
            session.flush()
            # Inside the transaction: if the store fails, the row stays for the next sweep.
            services.store.delete_blob(sha256)
            purged += 1
            freed += blob.size
    return purged, freed, False


def _completion_running(session: Session, now: datetime) -> bool:
    return bool(
        session.scalar(
            select(
                exists().where(
                    db.UploadSession.state == "completing", db.UploadSession.lease_until > now
                )
            )
        )
    )


def _live_reference(session: Session, sha256: str) -> bool:
    return bool(
        session.scalar(
            select(
                exists()
                .where(db.TracesetFile.sha256 == sha256)
                .where(db.Traceset.id == db.TracesetFile.traceset_id)
                .where(db.Traceset.status != "deleted")
            )
        )
    )


def _declared_by_upload(session: Session, sha256: str) -> bool:
    return bool(
        session.scalar(
            select(
                exists()
                .where(db.TracesetFile.expected_sha256 == sha256)
                .where(db.UploadSession.traceset_id == db.TracesetFile.traceset_id)
                .where(db.UploadSession.state.in_(IN_FLIGHT))
            )
        )
    )


def _unseen_ids(
    services: Services,
    column: InstrumentedAttribute[str],
    condition: ColumnElement[bool],
    should_stop: Callable[[], bool],
) -> Iterator[str]:
    """Ids matching ``condition``, a batch at a time, each once (a row another sweeper
    changed, or that this one left alone, is not offered again)."""
    seen: set[str] = set()
    while not should_stop():
        with services.db.session(write=False) as session:
            batch = [
                i
                for i in session.scalars(select(column).where(condition).limit(BATCH))
                if i not in seen
            ]
        if not batch:
            return
        seen.update(batch)
        yield from batch


def _rowcount(result: Any) -> int:
    return int(result.rowcount)
