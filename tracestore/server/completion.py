"""Use case: complete an upload. Exactly one request does the work (a lease in the
database), every byte is verified, and a completion cut off half-way can be retried."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tracestore import schemas
from tracestore.errors import (
    Conflict,
    Gone,
    PayloadTooLarge,
    ValidationError,
    quoted,
)
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.db import leases
from tracestore.server.inspection import queue_inspection, run_inspection
from tracestore.server.services import Services
from tracestore.server.storage.blobs import (
    CommittedBlob,
    FileLargerThanDeclared,
    StagedFile,
    normalise_etag,
)
from tracestore.server.tracesets import files_of, manifest_hash, traceset_text
from tracestore.server.upload_sessions import staged_file, visible_session

log = logging.getLogger("tracestore.completion")

COMPLETING_MESSAGE = "Upload session is already being completed by another request"


def complete_upload(
    services: Services, principal: Principal, request: schemas.CompleteRequest
) -> tuple[str, bool]:
    """Finish an upload; returns the traceset as the API answers it (JSON text, as
    ``tracesets.traceset_text`` writes it) and whether this call created it."""
    now = services.now()
    with services.db.session() as session:
        upload, traceset = visible_session(session, principal, request.upload_id)
        finished = expired = False
        if upload.state == "completed":
            finished = True
        elif upload.state == "failed":
            raise Conflict(f"Upload session '{upload.id}' has failed; start a new upload")
        elif upload.state == "expired" or now >= upload.expires_at:
            _fail_session(session, services, upload, traceset, "expired")
            expired = True
        else:
            files = files_of(session, upload.traceset_id)
            etags, declared = _check_request(request, files)
    if finished:
        return traceset_text(services, upload.traceset_id, viewer=principal), False
    if expired:
        raise Gone(f"Upload session '{upload.id}' has expired")

    owner = secrets.token_hex(8)
    if not _take_lease(services, upload.id, owner):
        with services.db.session(write=False) as session:
            upload = session.get(db.UploadSession, upload.id)  # type: ignore[assignment]
            finished = upload.state == "completed"
        if finished:
            return traceset_text(services, upload.traceset_id, viewer=principal), False
        raise Conflict(COMPLETING_MESSAGE)

    stages = {f.position: staged_file(upload, f) for f in files}
    try:
        committed = _commit_files(services, upload.id, files, stages, etags, declared, owner)
    except PayloadTooLarge:
        # More bytes than declared can never complete: the session fails.
        with services.db.session() as session:
            upload = session.get(db.UploadSession, upload.id)  # type: ignore[assignment]
            traceset = session.get(db.Traceset, upload.traceset_id)  # type: ignore[assignment]
            _fail_session(session, services, upload, traceset, "failed")
        raise
    except BaseException:
        _release_lease(services, upload.id, owner)
        raise

    with services.db.session() as session:
        done = session.execute(
            update(db.UploadSession)
            .where(leases.held(db.UploadSession, upload.id, owner, _COMPLETING))
            .values(state="completed", completed_at=services.now(), lease_until=None)
        )
        if done.rowcount != 1:  # type: ignore[attr-defined]
            raise Conflict(COMPLETING_MESSAGE)
        traceset = session.get(db.Traceset, upload.traceset_id)  # type: ignore[assignment]
        _link_blobs(session, traceset, committed, services.now())
        primary_bytes = sum(f.size for f in files if f.role == "primary")
        inspection_job = queue_inspection(session, services, upload.traceset_id, primary_bytes)
    # The staged bytes go on the background thread rather than in the client's wait (a
    # process stopped first leaves them to lifecycle.clean_leftover_staging).
    services.run_in_background(_discard_staging, services, upload.id, list(stages.values()))
    run_inspection(services, inspection_job)
    return traceset_text(services, upload.traceset_id, viewer=principal), True


def _discard_staging(services: Services, upload_id: str, stages: Sequence[StagedFile]) -> None:
    try:
        services.store.discard_staging(stages)
    except Exception:
        log.exception("removing the staged bytes of %s failed", upload_id)


def _check_request(
    request: schemas.CompleteRequest, files: Sequence[db.TracesetFile]
) -> tuple[dict[int, dict[int, str]], dict[int, str | None]]:
    """The ETags and the SHA-256 the client declares (at upload or now) per file position,
    after checking every file and part is named once."""
    by_name = {f.name: f for f in files}
    named: dict[str, schemas.CompletedFileInput] = {}
    for item in request.files:
        if item.name not in by_name:
            raise ValidationError(f"File {quoted(item.name)} is not part of this upload")
        if item.name in named:
            raise ValidationError(f"File {quoted(item.name)} is listed more than once")
        named[item.name] = item
    missing = [f.name for f in files if f.name not in named]
    if missing:
        raise ValidationError(
            f"Missing files: {', '.join(repr(m) for m in missing[:10])}"
            + (" …" if len(missing) > 10 else "")
        )
    etags: dict[int, dict[int, str]] = {}
    declared: dict[int, str | None] = {}
    for file in files:
        item = named[file.name]
        if item.sha256 and file.expected_sha256 and item.sha256 != file.expected_sha256:
            raise ValidationError(
                f"SHA-256 {item.sha256} given for file '{file.name}' differs from the "
                f"{file.expected_sha256} declared at upload"
            )
        declared[file.position] = item.sha256 or file.expected_sha256
        parts: dict[int, str] = {}
        for part in item.parts:
            if part.part_number in parts:
                raise ValidationError(
                    f"Part {part.part_number} of file '{file.name}' is listed more than once"
                )
            parts[part.part_number] = part.etag
        etags[file.position] = parts
    return etags, declared


_COMPLETING = db.UploadSession.state == "completing"


def _take_lease(services: Services, upload_id: str, owner: str) -> bool:
    """The completion's lease, of an open session or one whose completer's lease lapsed."""
    now = services.now()
    free = (db.UploadSession.state == "open") | (_COMPLETING & (db.UploadSession.lease_until < now))
    until = now + services.settings.completion_lease
    with services.db.session() as session:
        return leases.take(
            session, db.UploadSession, upload_id, free, owner, until, state="completing"
        )


def _release_lease(services: Services, upload_id: str, owner: str) -> None:
    with services.db.session() as session:
        session.execute(
            update(db.UploadSession)
            .where(leases.held(db.UploadSession, upload_id, owner, _COMPLETING))
            .values(state="open", lease_owner=None, lease_until=None)
        )


def _commit_files(
    services: Services,
    upload_id: str,
    files: Sequence[db.TracesetFile],
    stages: Mapping[int, StagedFile],
    etags: dict[int, dict[int, str]],
    declared: dict[int, str | None],
    owner: str,
) -> dict[int, str]:
    """Move every file's staged bytes into blobs; the SHA-256 per file position. Raises
    PayloadTooLarge when a file holds more bytes than it declared."""
    store = services.store
    # Check every file's parts before moving any bytes: first what the request alone shows
    # (no store call for a request that cannot complete), then against one listing of all.
    for file in files:
        stage = stages[file.position]
        given = etags[file.position]
        expected_numbers = set(range(1, stage.part_count + 1))
        unexpected = sorted(set(given) - expected_numbers)
        if unexpected:
            raise ValidationError(
                f"File '{file.name}' has {stage.part_count} parts; part {unexpected[0]} is not one"
            )
        if set(given) != expected_numbers:
            raise ValidationError(f"Missing parts for file '{file.name}'")
    listed = store.list_parts([stages[file.position] for file in files])
    for file, stored in zip(files, listed, strict=True):
        stage = stages[file.position]
        given = etags[file.position]
        for number in range(1, stage.part_count + 1):
            part = stored.get(number)
            if part is None:
                raise ValidationError(
                    f"Missing parts for file '{file.name}': part {number} was never received"
                )
            if normalise_etag(part.etag) != normalise_etag(given[number]):
                raise ValidationError(
                    f"ETag {quoted(given[number])} for part {number} of file '{file.name}' does "
                    "not match the part the store holds; send the ETag the part PUT answered"
                )
            expected = stage.part_length(number)
            if part.size > expected:
                raise PayloadTooLarge(
                    f"File {file.name} is larger than its declared size of {file.size} bytes "
                    f"(part {number} has {part.size} bytes, {expected} expected)"
                )
            if part.size < expected:
                raise ValidationError(
                    f"Part {number} of file '{file.name}' has {part.size} bytes; "
                    f"{expected} expected"
                )
    # Renewed a few times per lease period as files are sealed and placed, not per file.
    lease = leases.Renewal(
        services.db,
        db.UploadSession,
        leases.held(db.UploadSession, upload_id, owner),
        services.settings.completion_lease,
        services.now,
        every=services.settings.completion_lease / 4,
    )

    def seal(file: db.TracesetFile) -> CommittedBlob:
        try:
            blob = store.seal_file(
                stages[file.position], etags[file.position], heartbeat=lease.beat
            )
        except FileLargerThanDeclared as exc:
            raise PayloadTooLarge(
                f"File {file.name} is {exc.size} bytes, larger than its declared size of "
                f"{file.size} bytes"
            ) from None
        expected = declared[file.position]
        if expected and expected != blob.sha256:
            raise ValidationError(
                f"SHA-256 of file '{file.name}' is {blob.sha256}, not the {expected} "
                "the client declared; re-send its parts"
            )
        lease.beat()
        return blob

    def place(file: db.TracesetFile, blob: CommittedBlob) -> None:
        store.place_file(stages[file.position], blob, heartbeat=lease.beat)
        lease.beat()

    # Hashing releases the GIL: files are sealed on as many threads as there are cores.
    # Every blob is pinned (one transaction) before any is placed (BlobStore.place_file).
    with ThreadPoolExecutor(max(1, min(len(files), os.cpu_count() or 1, 4))) as pool:
        sealed = list(pool.map(seal, files))
        _pin_blobs(services, {blob.sha256: blob.size for blob in sealed})
        list(pool.map(place, files, sealed))
    return {file.position: blob.sha256 for file, blob in zip(files, sealed, strict=True)}


# Blobs pinned per statement; well under any engine's limit on bound parameters.
_PIN_BATCH = 500


def _pin_blobs(services: Services, sizes: Mapping[str, int]) -> None:
    """Record the blobs, or refresh them, so a purge leaves them alone for the grace period;
    one transaction. Plain statements, not an ORM read-modify-write: an UPDATE racing a
    purge's DELETE waits for it and then finds no row, and the INSERT records the blob
    anew."""
    now = services.now()
    hashes = sorted(sizes)
    for attempt in range(2):
        try:
            with services.db.session() as session:
                for start in range(0, len(hashes), _PIN_BATCH):
                    batch = hashes[start : start + _PIN_BATCH]
                    session.execute(
                        update(db.Blob)
                        .where(db.Blob.sha256.in_(batch), db.Blob.unreferenced_since.is_not(None))
                        .values(unreferenced_since=now)
                    )
                    known = set(
                        session.scalars(select(db.Blob.sha256).where(db.Blob.sha256.in_(batch)))
                    )
                    session.add_all(
                        db.Blob(sha256=h, size=sizes[h], created_at=now, unreferenced_since=now)
                        for h in batch
                        if h not in known
                    )
            return
        except IntegrityError:
            if attempt:  # a concurrent completion recorded the same blob twice in a row
                raise


def _link_blobs(
    session: Session, traceset: db.Traceset, hashes: dict[int, str], now: datetime
) -> None:
    files = files_of(session, traceset.id)
    for file in files:
        file.sha256 = hashes[file.position]
        file.staging_handle = None
        if file.role != "primary":
            file.metadata_status = "complete"
    session.flush()
    session.execute(
        update(db.Blob)
        .where(db.Blob.sha256.in_(set(hashes.values())))
        .values(unreferenced_since=None)
    )
    traceset.status = "ready"
    traceset.updated_at = now
    traceset.hash = manifest_hash(files)


def _fail_session(
    session: Session,
    services: Services,
    upload: db.UploadSession,
    traceset: db.Traceset,
    state: str,
) -> None:
    """End a session that can never complete; its traceset fails and its bytes go."""
    upload.state = state
    upload.lease_owner = None
    upload.lease_until = None
    traceset.status = "upload_failed"
    traceset.updated_at = services.now()
    services.store.discard_staging(
        [staged_file(upload, file) for file in files_of(session, traceset.id)]
    )
