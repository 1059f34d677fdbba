"""Use cases of an upload: start, resume, receive a part (embedded store), complete."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from tracestore import jsontext, metadata, schemas
from tracestore.errors import (
    Conflict,
    Gone,
    NotFound,
    PayloadTooLarge,
    TracestoreError,
    ValidationError,
)
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.blobs import (
    FileLargerThanDeclared,
    LocalBlobStore,
    StagedFile,
    normalise_etag,
)
from tracestore.server.ids import new_id
from tracestore.server.inspection import schedule_inspection
from tracestore.server.services import Services
from tracestore.server.settings import MAX_PARTS_PER_FILE, MIB
from tracestore.server.tracesets import files_of, manifest_hash, traceset_view
from tracestore.server.validation import parse_json_body

COMPLETING_MESSAGE = "Upload session is already being completed by another request"


def part_size_for(size: int, base: int) -> int:
    """The session's part size, raised (to whole MiB) so no file needs over 10,000 parts."""
    needed = -(-size // MAX_PARTS_PER_FILE)
    return max(base, -(-needed // MIB) * MIB)


def parse_upload_request(body: bytes) -> tuple[schemas.UploadRequest, int | None]:
    """Parse and check an upload-url body; its metadata rank count. Raises ValidationError."""
    request = parse_json_body(body, schemas.UploadRequest)
    has_primary = any(spec.role == "primary" for spec in request.files)
    rank_count = metadata.check_upload_metadata(
        request.workload_metadata, has_primary_files=has_primary
    )
    return request, rank_count


def start_upload(
    services: Services, principal: Principal, body: bytes
) -> schemas.UploadUrlResponse:
    """Check everything first, then create the traceset, its session and the part URLs."""
    request, rank_count = parse_upload_request(body)
    settings = services.settings
    if len(request.files) > settings.max_files_per_upload:
        raise ValidationError(
            f"An upload may hold at most {settings.max_files_per_upload} files; "
            f"got {len(request.files)}"
        )
    workspace_id = request.workspace_id or principal.default_workspace_id
    if workspace_id is None:
        raise ValidationError("workspaceId is required: the caller has no default workspace")
    principal.require_member(workspace_id)

    now = services.now()
    traceset_id = new_id("ts")
    upload_id = new_id("upload")
    ttl_days = request.ttl_days or settings.default_ttl_days
    staged: list[StagedFile] = []
    try:
        for position, spec in enumerate(request.files):
            staged.append(
                services.store.stage_file(
                    upload_id,
                    position,
                    spec.size,
                    part_size_for(spec.size, settings.part_size),
                    spec.content_type,
                )
            )
        with services.db.session() as session:
            metadata_text = (
                None
                if request.workload_metadata is None
                else jsontext.dumps(request.workload_metadata)
            )
            session.add(
                db.Traceset(
                    id=traceset_id,
                    tenant_id=principal.tenant_id,
                    workspace_id=workspace_id,
                    created_by=principal.user_id,
                    name=request.name,
                    description=request.description,
                    tags=list(request.tags),
                    status="uploading",
                    scope="workspace",
                    created_at=now,
                    updated_at=now,
                    expires_at=now + timedelta(days=ttl_days),
                    ttl_days=ttl_days,
                    rank_count=rank_count,
                    total_size=sum(f.size for f in request.files),
                    file_count=len(request.files),
                    hash=None,
                    metadata_text=metadata_text,
                    workload_metadata=jsontext.plain(request.workload_metadata),
                )
            )
            session.flush()
            for position, (spec, stage) in enumerate(zip(request.files, staged, strict=True)):
                session.add(
                    db.TracesetFile(
                        traceset_id=traceset_id,
                        position=position,
                        name=spec.name,
                        size=spec.size,
                        role=spec.role,
                        content_type=spec.content_type,
                        expected_sha256=spec.sha256,
                        staging_handle=stage.handle,
                        metadata_status="pending",
                    )
                )
            upload = db.UploadSession(
                id=upload_id,
                traceset_id=traceset_id,
                state="open",
                part_size=settings.part_size,
                created_at=now,
                expires_at=now + settings.session_ttl,
            )
            session.add(upload)
            files = files_of(session, traceset_id)
            return _session_view(services, upload, files, with_received=False)
    except BaseException:
        for stage in staged:
            services.store.discard_staging(stage)
        raise


def resume_upload(
    services: Services, principal: Principal, upload_id: str
) -> schemas.UploadSessionResponse:
    """The session as it stands: parts received, and fresh URLs for the parts missing."""
    with services.db.session(write=False) as session:
        upload, _traceset = _visible_session(session, principal, upload_id)
        _check_not_expired(upload, services.now())
        files = files_of(session, upload.traceset_id)
        view = _session_view(services, upload, files, with_received=True)
        return schemas.UploadSessionResponse(**view.model_dump(), state=upload.state)


def _session_view(
    services: Services,
    upload: db.UploadSession,
    files: Sequence[db.TracesetFile],
    *,
    with_received: bool,
) -> schemas.UploadUrlResponse:
    now = services.now()
    urls_expire = min(now + services.settings.part_url_ttl, upload.expires_at)
    out = []
    for file in files:
        stage = staged_file(upload, file)
        received = services.store.list_parts(stage) if with_received else {}
        out.append(
            schemas.UploadFileUrls(
                name=file.name,
                size=file.size,
                part_urls_expire_at=urls_expire,
                parts=[
                    schemas.PartUrl(
                        part_number=n,
                        size=stage.part_length(n),
                        url=services.store.part_url(stage, n, urls_expire),
                    )
                    for n in range(1, stage.part_count + 1)
                    if n not in received
                ],
                received_parts=[
                    schemas.ReceivedPart(part_number=p.part_number, size=p.size, etag=p.etag)
                    for _, p in sorted(received.items())
                ],
            )
        )
    return schemas.UploadUrlResponse(
        upload_id=upload.id,
        traceset_id=upload.traceset_id,
        expires_at=upload.expires_at,
        part_size=upload.part_size,
        files=out,
    )


def staged_file(upload: db.UploadSession, file: db.TracesetFile) -> StagedFile:
    return StagedFile(
        upload.id,
        file.position,
        file.size,
        part_size_for(file.size, upload.part_size),
        file.staging_handle,
    )


def _visible_session(
    session: Session, principal: Principal, upload_id: str
) -> tuple[db.UploadSession, db.Traceset]:
    upload = session.get(db.UploadSession, upload_id)
    traceset = session.get(db.Traceset, upload.traceset_id) if upload else None
    if upload is None or traceset is None or not principal.can_write(traceset):
        raise NotFound(f"Upload session '{upload_id}' not found")
    return upload, traceset


def _check_not_expired(upload: db.UploadSession, now: datetime) -> None:
    if upload.state == "expired" or (
        upload.state in ("open", "completing") and now >= upload.expires_at
    ):
        raise Gone(f"Upload session '{upload.id}' has expired")


# --- receiving a part (embedded store only; S3 receives parts itself) ---


@dataclass(frozen=True)
class PartTarget:
    stage: StagedFile
    part_number: int


def part_target(
    services: Services,
    upload_id: str,
    position: int,
    part_number: int,
    size: int,
    part_size: int,
    expires: int,
    signature: str,
) -> PartTarget:
    """Check a part URL's signature and that its session still takes parts."""
    store = services.store
    if not isinstance(store, LocalBlobStore):
        raise NotFound("This service does not receive parts itself")
    now = services.now()
    store.verify_part_url(
        upload_id, position, part_number, size, part_size, expires, signature, now
    )
    with services.db.session(write=False) as session:
        upload = session.get(db.UploadSession, upload_id)
        file = session.get(db.TracesetFile, (upload.traceset_id, position)) if upload else None
        if upload is None or file is None:
            raise NotFound(f"Upload session '{upload_id}' not found")
        _check_not_expired(upload, now)
        if upload.state not in ("open", "completing"):
            raise Conflict(f"Upload session '{upload_id}' is {upload.state}; it takes no parts")
        return PartTarget(staged_file(upload, file), part_number)


_WRITE_BATCH = 1024 * 1024


async def receive_part(
    services: Services,
    target: PartTarget,
    body: AsyncIterator[bytes],
    content_length: str | None,
    checksum: str | None,
) -> str:
    """Write one part's body to the embedded store as it arrives; the part's ETag. A body
    whose declared length is wrong is refused before a byte is written."""
    number = target.part_number
    expected = target.stage.part_length(number)
    if content_length is not None and content_length.isdigit():
        if int(content_length) > expected:
            raise PayloadTooLarge(
                f"Part {number} is {content_length} bytes, larger than its size of {expected}"
            )
        if int(content_length) < expected:
            raise ValidationError(
                f"Part {number} is {content_length} bytes; its size is {expected}"
            )
    store = services.store
    if not isinstance(store, LocalBlobStore):
        raise NotFound("This service does not receive parts itself")
    writer = await run_in_threadpool(
        store.open_part_writer, target.stage, number, length_known=content_length is not None
    )
    hash_it = checksum is not None
    try:
        pending: list[bytes] = []
        pending_size = 0
        async for chunk in body:
            pending.append(chunk)
            pending_size += len(chunk)
            if pending_size >= _WRITE_BATCH:
                await run_in_threadpool(writer.write, b"".join(pending), hash_it=hash_it)
                pending, pending_size = [], 0
        if pending:
            await run_in_threadpool(writer.write, b"".join(pending), hash_it=hash_it)
        return await run_in_threadpool(writer.finish, checksum)
    except BaseException:
        writer.abort()
        raise


# --- completion ---


def complete_upload(
    services: Services, principal: Principal, request: schemas.CompleteRequest
) -> tuple[schemas.Traceset, bool]:
    """Finish an upload; returns the traceset view and whether this call created it."""
    now = services.now()
    with services.db.session() as session:
        upload, traceset = _visible_session(session, principal, request.upload_id)
        if upload.state == "completed":
            return traceset_view(session, traceset), False
        if upload.state == "failed":
            raise Conflict(f"Upload session '{upload.id}' has failed; start a new upload")
        if upload.state == "expired" or now >= upload.expires_at:
            _fail_session(session, services, upload, traceset, "expired")
            expired = True
        else:
            expired = False
            files = files_of(session, upload.traceset_id)
            etags = _check_request(request, files)
    if expired:
        raise Gone(f"Upload session '{upload.id}' has expired")

    owner = secrets.token_hex(8)
    if not _take_lease(services, upload.id, owner):
        with services.db.session(write=False) as session:
            upload = session.get(db.UploadSession, upload.id)  # type: ignore[assignment]
            traceset = session.get(db.Traceset, upload.traceset_id)  # type: ignore[assignment]
            if upload.state == "completed":
                return traceset_view(session, traceset), False
        raise Conflict(COMPLETING_MESSAGE)

    try:
        committed = _commit_files(services, upload, files, etags, owner)
    except FileLargerThanDeclared as exc:
        with services.db.session() as session:
            upload = session.get(db.UploadSession, upload.id)  # type: ignore[assignment]
            traceset = session.get(db.Traceset, upload.traceset_id)  # type: ignore[assignment]
            _fail_session(session, services, upload, traceset, "failed")
        raise PayloadTooLarge(exc.message) from None
    except BaseException:
        _release_lease(services, upload.id, owner)
        raise

    with services.db.session() as session:
        done = session.execute(
            update(db.UploadSession)
            .where(
                db.UploadSession.id == upload.id,
                db.UploadSession.lease_owner == owner,
                db.UploadSession.state == "completing",
            )
            .values(state="completed", completed_at=services.now(), lease_until=None)
        )
        if done.rowcount != 1:  # type: ignore[attr-defined]
            raise Conflict(COMPLETING_MESSAGE)
        traceset = session.get(db.Traceset, upload.traceset_id)  # type: ignore[assignment]
        _link_blobs(session, traceset, committed, services.now())
    for file in files:
        services.store.discard_staging(staged_file(upload, file))
    primary_bytes = sum(f.size for f in files if f.role == "primary")
    schedule_inspection(services, upload.traceset_id, primary_bytes)
    with services.db.session(write=False) as session:
        traceset = session.get(db.Traceset, upload.traceset_id)  # type: ignore[assignment]
        return traceset_view(session, traceset), True


def _check_request(
    request: schemas.CompleteRequest, files: Sequence[db.TracesetFile]
) -> dict[int, dict[int, str]]:
    """The ETags per file position, after checking every file and part is named once."""
    by_name = {f.name: f for f in files}
    named: dict[str, schemas.CompleteFile] = {}
    for item in request.files:
        if item.name not in by_name:
            raise ValidationError(f"File '{item.name}' is not part of this upload")
        if item.name in named:
            raise ValidationError(f"File '{item.name}' is listed more than once")
        named[item.name] = item
    missing = [f.name for f in files if f.name not in named]
    if missing:
        raise ValidationError(
            f"Missing files: {', '.join(repr(m) for m in missing[:10])}"
            + (" …" if len(missing) > 10 else "")
        )
    etags: dict[int, dict[int, str]] = {}
    for file in files:
        item = named[file.name]
        parts: dict[int, str] = {}
        for part in item.parts:
            if part.part_number in parts:
                raise ValidationError(
                    f"Part {part.part_number} of file '{file.name}' is listed more than once"
                )
            parts[part.part_number] = part.etag
        etags[file.position] = parts
    return etags


def _take_lease(services: Services, upload_id: str, owner: str) -> bool:
    now = services.now()
    with services.db.session() as session:
        result = session.execute(
            update(db.UploadSession)
            .where(
                db.UploadSession.id == upload_id,
                (db.UploadSession.state == "open")
                | ((db.UploadSession.state == "completing") & (db.UploadSession.lease_until < now)),
            )
            .values(
                state="completing",
                lease_owner=owner,
                lease_until=now + services.settings.completion_lease,
            )
        )
        return result.rowcount == 1  # type: ignore[attr-defined, no-any-return]


def _renew_lease(services: Services, upload_id: str, owner: str) -> None:
    with services.db.session() as session:
        session.execute(
            update(db.UploadSession)
            .where(db.UploadSession.id == upload_id, db.UploadSession.lease_owner == owner)
            .values(lease_until=services.now() + services.settings.completion_lease)
        )


def _release_lease(services: Services, upload_id: str, owner: str) -> None:
    with services.db.session() as session:
        session.execute(
            update(db.UploadSession)
            .where(
                db.UploadSession.id == upload_id,
                db.UploadSession.lease_owner == owner,
                db.UploadSession.state == "completing",
            )
            .values(state="open", lease_owner=None, lease_until=None)
        )


def _commit_files(
    services: Services,
    upload: db.UploadSession,
    files: Sequence[db.TracesetFile],
    etags: dict[int, dict[int, str]],
    owner: str,
) -> dict[int, str]:
    """Move every file's staged bytes into blobs; the SHA-256 per file position."""
    store = services.store
    stages = {f.position: staged_file(upload, f) for f in files}
    # Check every file's parts before moving any bytes.
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
        stored = store.list_parts(stage)
        for number in sorted(expected_numbers):
            part = stored.get(number)
            if part is None:
                raise ValidationError(
                    f"Missing parts for file '{file.name}': part {number} was never received"
                )
            if normalise_etag(part.etag) != normalise_etag(given[number]):
                raise ValidationError(
                    f"ETag {given[number]!r} for part {number} of file '{file.name}' does not "
                    "match the part the store holds; send the ETag the part PUT answered"
                )
            expected = stage.part_length(number)
            if part.size > expected:
                raise FileLargerThanDeclared(
                    f"File {file.name} is larger than its declared size of {file.size} bytes "
                    f"(part {number} has {part.size} bytes, {expected} expected)"
                )
            if part.size < expected:
                raise ValidationError(
                    f"Part {number} of file '{file.name}' has {part.size} bytes; "
                    f"{expected} expected"
                )
    lease = _LeaseKeeper(services, upload.id, owner)

    def commit(file: db.TracesetFile) -> str:
        try:
            blob = store.commit_file(
                stages[file.position],
                etags[file.position],
                heartbeat=lease.renew,
                pin=lambda sha256, size: _pin_blob(services, sha256, size),
            )
        except FileLargerThanDeclared as exc:
            raise FileLargerThanDeclared(
                f"File {file.name} is {exc.message} bytes, larger than its declared size of "
                f"{file.size} bytes"
            ) from None
        if file.expected_sha256 and file.expected_sha256 != blob.sha256:
            raise ValidationError(
                f"SHA-256 of file '{file.name}' is {blob.sha256}, not the {file.expected_sha256} "
                "declared at upload; re-send its parts"
            )
        lease.renew()
        return blob.sha256

    # Hashing releases the GIL: files are committed on as many threads as there are cores.
    with ThreadPoolExecutor(max(1, min(len(files), os.cpu_count() or 1, 4))) as pool:
        return dict(zip([f.position for f in files], pool.map(commit, files), strict=True))


class _LeaseKeeper:
    """Renews a completion's lease, at most a few times per lease period (not per file)."""

    def __init__(self, services: Services, upload_id: str, owner: str) -> None:
        self._services = services
        self._upload_id = upload_id
        self._owner = owner
        self._every = services.settings.completion_lease.total_seconds() / 4
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def renew(self) -> None:
        with self._lock:
            if time.monotonic() - self._last < self._every:
                return
            self._last = time.monotonic()
        _renew_lease(self._services, self._upload_id, self._owner)


def _pin_blob(services: Services, sha256: str, size: int) -> None:
    """Record the blob, or refresh it, so a purge leaves it alone for the grace period.
    Plain statements, not an ORM read-modify-write: an UPDATE racing a purge's DELETE
    waits for it and then finds no row, and the INSERT records the blob anew."""
    now = services.now()
    for attempt in range(2):
        try:
            with services.db.session() as session:
                refreshed = session.execute(
                    update(db.Blob)
                    .where(db.Blob.sha256 == sha256, db.Blob.unreferenced_since.is_not(None))
                    .values(unreferenced_since=now)
                )
                if refreshed.rowcount == 0 and session.get(db.Blob, sha256) is None:  # type: ignore[attr-defined]
                    session.add(
                        db.Blob(sha256=sha256, size=size, created_at=now, unreferenced_since=now)
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
    for file in files_of(session, traceset.id):
        services.store.discard_staging(staged_file(upload, file))


__all__ = ["TracestoreError", "complete_upload", "resume_upload", "start_upload"]
