"""Use cases of an upload: start it, resume it (receiving parts is ``receiving.py``,
completing ``completion.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from tracestore import metadata, schemas
from tracestore.errors import Conflict, ValidationError
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.blobs import StagedFile
from tracestore.server.ids import new_id
from tracestore.server.services import Services
from tracestore.server.sessions import (
    check_not_expired,
    part_size_for,
    staged_file,
    visible_session,
)
from tracestore.server.tracesets import files_of, store_metadata
from tracestore.server.validation import parse_json_body


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
    upload_id = new_id("upload", now=now.timestamp())  # its time dates orphaned staging
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
            traceset = db.Traceset(
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
            )
            store_metadata(traceset, request.workload_metadata)
            session.add(traceset)
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
    """The session as it stands: parts received, and fresh URLs for the parts missing. A
    completed session lists no parts: its traceset is ready (a client whose completion's
    answer was lost learns it here)."""
    with services.db.session(write=False) as session:
        upload, _traceset = visible_session(session, principal, upload_id)
        if upload.state == "failed":
            raise Conflict(f"Upload session '{upload.id}' has failed; start a new upload")
        check_not_expired(upload.id, upload.state, upload.expires_at, services.now())
        files = files_of(session, upload.traceset_id)
        takes_parts = upload.state != "completed"
        view = _session_view(
            services, upload, files, with_received=takes_parts, with_urls=takes_parts
        )
        return schemas.UploadSessionResponse(**view.model_dump(), state=upload.state)


def _session_view(
    services: Services,
    upload: db.UploadSession,
    files: Sequence[db.TracesetFile],
    *,
    with_received: bool,
    with_urls: bool = True,
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
                    if with_urls and n not in received
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
