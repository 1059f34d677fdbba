"""Use cases of an upload: start it, resume it (receiving parts is ``receiving.py``,
completing ``completion.py``)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from sqlalchemy import Table, insert

from tracestore import metadata, schemas
from tracestore.errors import Conflict, NotFound, PayloadTooLarge, ValidationError, quoted
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.ids import new_id
from tracestore.server.presigned import RequestOrigin, request_base_url
from tracestore.server.request_bodies import parse_json_body
from tracestore.server.services import Services, stores_bytes_locally
from tracestore.server.storage.blobs import StagedFile
from tracestore.server.tracesets import files_of, metadata_columns, tag_rows
from tracestore.server.upload_sessions import (
    check_not_expired,
    part_size_for,
    staged_file,
    visible_session,
)

if TYPE_CHECKING:
    from tracestore.server.deps import Caller

# The inserts of the rows upload-url writes whole, with Core (see start_upload): made once,
# their cache keys too (a new statement's key was computed every time).
_INSERT_TRACESET = insert(cast(Table, db.Traceset.__table__))
_INSERT_FILES = insert(cast(Table, db.TracesetFile.__table__))
_INSERT_SESSION = insert(cast(Table, db.UploadSession.__table__))
_INSERT_TAGS = insert(cast(Table, db.TracesetTag.__table__))


def parse_upload_request(body: bytes) -> tuple[schemas.TracesetUploadUrlRequest, int | None]:
    """Parse and check an upload-url body; its metadata rank count. Raises ValidationError."""
    request = parse_json_body(body, schemas.TracesetUploadUrlRequest)
    has_primary = any(spec.role == "primary" for spec in request.files)
    rank_count = metadata.check_upload_metadata(
        request.workload_metadata, has_primary_files=has_primary
    )
    return request, rank_count


class CheckedUpload(NamedTuple):
    """An upload-url body that passed every check: what the start writes from."""

    request: schemas.TracesetUploadUrlRequest
    rank_count: int | None
    workspace_id: str
    warnings: list[str]


def checked_upload(services: Services, principal: Principal, body: bytes) -> CheckedUpload:
    """Every check upload-url makes before it creates anything, in its order: the body, its
    workloadMetadata, the settings' limits, the workspace. Raises what upload-url answers."""
    request, rank_count = parse_upload_request(body)
    settings = services.settings
    if len(request.files) > settings.max_files_per_upload:
        raise ValidationError(
            f"An upload may hold at most {settings.max_files_per_upload} files; "
            f"got {len(request.files)}"
        )
    declared = sum(spec.size for spec in request.files)
    if declared > settings.max_upload_size:
        raise PayloadTooLarge(
            f"The files of an upload may total at most {settings.max_upload_size} bytes; "
            f"these total {declared}"
        )
    workspace_id = request.workspace_id or principal.default_workspace_id
    if workspace_id is None:
        raise ValidationError("workspaceId is required: the caller has no default workspace")
    principal.require_member(workspace_id)
    warnings = metadata.upload_warnings(request.workload_metadata, rank_count)
    return CheckedUpload(request, rank_count, workspace_id, warnings)


def check_upload(
    services: Services, principal: Principal, body: bytes
) -> schemas.UploadCheckAnswer:
    """upload-url's dry run: its checks of ``body`` and nothing else (nothing stored or
    staged, no id drawn); the same error where upload-url would refuse the body."""
    checked = checked_upload(services, principal, body)
    return schemas.UploadCheckAnswer(rank_count=checked.rank_count, warnings=checked.warnings)


def upload_census(
    services: Services, principal: Principal, body: bytes
) -> schemas.UploadCensusAnswer:
    """The rank census of an upload's primary files before they are sent, each known by its
    first bytes: the quick inspection and the checks ``tracestore upload`` runs on the
    whole files (``census.upload_problems``), ``unknown`` when a file's first bytes do not
    tell its rank. Nothing is stored; the work grows with the bytes sent."""
    from tracestore.inspect import rank_census
    from tracestore.inspect.census import upload_problems
    from tracestore.inspect.files import inspect_head

    request = parse_json_body(body, schemas.UploadCensusRequest)
    settings = services.settings
    if len(request.files) > settings.max_files_per_upload:
        raise ValidationError(
            f"An upload may hold at most {settings.max_files_per_upload} files; "
            f"got {len(request.files)}"
        )
    names = [spec.name for spec in request.files]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise ValidationError(f"File name {twice!r} appears more than once")
    declared = metadata.check_upload_metadata(request.workload_metadata, has_primary_files=True)
    found, unread = [], []
    for spec in request.files:
        result, past = inspect_head(
            spec.head_bytes(), spec.name, spec.size, limits=settings.inspect_limits
        )
        if past and result.rank is None:
            unread.append(spec.name)
        found.append((spec.name, result))
    census = rank_census(
        found, declared_rank_count=declared, workload_metadata=request.workload_metadata
    )
    problems = upload_problems(census)
    return schemas.UploadCensusAnswer(
        census="unknown" if unread else "fail" if problems else "pass",
        missing_ranks=None if unread else census.missing_count,
        expected_rank_count=census.expected_rank_count,
        ranks_found=list(census.ranks_found),
        problems=problems,
        unread=unread,
    )


def start_upload(
    services: Services, principal: Principal, body: bytes, base_url: str
) -> schemas.UploadUrlResponse:
    """Check everything first, then create the traceset, its session and the part URLs
    (on ``base_url``, where the caller reaches the service, for the embedded store)."""
    request, rank_count, workspace_id, warnings = checked_upload(services, principal, body)
    settings = services.settings
    now = services.now()
    traceset_id = new_id("ts")
    upload_id = new_id("upload", now=now.timestamp())  # its time dates orphaned staging
    ttl_days = request.ttl_days or settings.default_ttl_days
    expires_at = now + timedelta(days=ttl_days)
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
        # Plain rows, not ORM objects: nothing but the insert reads them.
        traceset = {
            "id": traceset_id,
            "tenant_id": principal.tenant_id,
            "workspace_id": workspace_id,
            "created_by": principal.user_id,
            "name": request.name,
            "description": request.description,
            "tags": list(request.tags),
            "status": "uploading",
            "scope": "workspace",
            "created_at": now,
            "updated_at": now,
            "expires_at": expires_at,
            "ttl_days": ttl_days,
            "rank_count": rank_count,
            "total_size": sum(f.size for f in request.files),
            "file_count": len(request.files),
            "hash": None,
            **metadata_columns(request.workload_metadata),
        }
        files = [
            {
                "traceset_id": traceset_id,
                "position": position,
                "name": spec.name,
                "size": spec.size,
                "role": spec.role,
                "content_type": spec.content_type,
                "expected_sha256": spec.sha256,
                "staging_handle": stage.handle,
                "metadata_status": "pending",
            }
            for position, (spec, stage) in enumerate(zip(request.files, staged, strict=True))
        ]
        upload = _NewSession(
            id=upload_id,
            traceset_id=traceset_id,
            part_size=settings.part_size,
            expires_at=now + settings.session_ttl,
        )
        session_row = {**upload._asdict(), "state": "open", "created_at": now}
        # The answer first: it reads nothing stored, and if it fails nothing is written.
        named = [(spec.name, stage) for spec, stage in zip(request.files, staged, strict=True)]
        answer = _session_view(
            services,
            upload,
            named,
            base_url,
            with_received=False,
            traceset_expiry=(expires_at, ttl_days),
        )
        answer.warnings = warnings
        # One transaction of three inserts, one per table: neither the unit of work's
        # flushes (a fifth of the request) nor the ORM's bulk insert (a fifth of what was
        # left) is needed for rows this function writes whole, nor on SQLite Core's
        # execution around the statements (``Database.insert_rows``).
        services.db.insert_rows(
            [
                (_INSERT_TRACESET, [traceset]),
                (_INSERT_FILES, files),
                (_INSERT_SESSION, [session_row]),
                (_INSERT_TAGS, tag_rows(traceset_id, request.tags)),
            ]
        )
        return answer
    except BaseException:
        services.store.discard_staging(staged)
        raise


# Bodies up to this size are parsed where the start's one write runs (the event loop's thread
# on SQLite, ``Caller.write``); larger ones in a worker thread, one at a time per process:
# 16 MiB of JSON held the loop for seconds (issue 41), and its values take up to twenty
# times its size in memory while parsed. Real uploads of a few hundred files are under it.
INLINE_BODY = 64 * 1024


async def upload_url_text(caller: Caller, body: bytes, origin: RequestOrigin) -> str:
    """upload-url's answer to ``body`` (its route's and its lane's): a short write where
    the start's other I/O is local (the embedded store stages files on disk), off the event
    loop and one at a time when the body is larger than ``INLINE_BODY``."""
    if len(body) > INLINE_BODY:
        async with _big_bodies():
            return await caller.run(start_upload_text, body, origin)
    if stores_bytes_locally(caller.services.settings):
        return await caller.write(start_upload_text, body, origin)
    return await caller.run(start_upload_text, body, origin)


async def upload_check_answer(caller: Caller, body: bytes) -> schemas.UploadCheckAnswer:
    """upload-url's dry run of ``body`` (its route's): a short read, off the event loop and
    one at a time when the body is larger than ``INLINE_BODY``, as upload-url parses it."""
    if len(body) > INLINE_BODY:
        async with _big_bodies():
            return await caller.run(check_upload, body)
    return await caller.read(check_upload, body)


def _big_bodies() -> asyncio.Semaphore:
    """The running loop's turn for a big body (an asyncio lock is its loop's alone); waiting
    for it holds no thread."""
    loop = asyncio.get_running_loop()
    turn = _BIG_BODIES.get(loop)
    if turn is None:
        turn = _BIG_BODIES[loop] = asyncio.Semaphore(1)
    return turn


_BIG_BODIES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def start_upload_text(
    services: Services, principal: Principal, body: bytes, origin: RequestOrigin
) -> str:
    """``start_upload``'s answer as JSON text, its URLs on the base ``origin`` names."""
    # The base URL after the token's check: a bad token is a 401 whatever the Host says.
    answer = start_upload(services, principal, body, request_base_url(origin))
    # Written here, in the request's thread, by pydantic's compiled serializer: FastAPI
    # validated the returned model again and serialized it, on the event loop, a tenth of
    # the request. The same text (tests/test_request_path.py).
    return answer.model_dump_json(by_alias=True)


def resume_upload(
    services: Services,
    principal: Principal,
    upload_id: str,
    base_url: str,
    file_name: str | None = None,
    from_part: int = 1,
) -> schemas.UploadSessionResponse:
    """The session as it stands: parts received, and fresh URLs for the first parts missing
    (a page, as ``start_upload`` answers). With ``file_name``, that file alone and its
    missing parts from ``from_part`` on (the next page of it). A completed session lists no
    parts: its traceset is ready (a client whose completion's answer was lost learns it
    here)."""
    with services.db.session(write=False) as session:
        upload, traceset = visible_session(session, principal, upload_id)
        if upload.state == "failed":
            raise Conflict(f"Upload session '{upload.id}' has failed; start a new upload")
        check_not_expired(upload.id, upload.state, upload.expires_at, services.now())
        files = files_of(session, upload.traceset_id)
        if file_name is not None:
            files = [f for f in files if f.name == file_name]
            if not files:
                raise NotFound(f"File {quoted(file_name)} is not part of upload '{upload.id}'")
        takes_parts = upload.state != "completed"
        view = _session_view(
            services,
            upload,
            [(file.name, staged_file(upload, file)) for file in files],
            base_url,
            with_received=takes_parts,
            with_urls=takes_parts,
            from_part=from_part,
            traceset_expiry=(traceset.expires_at, traceset.ttl_days),
        )
        return schemas.UploadSessionResponse(**view.model_dump(), state=upload.state)


class _NewSession(NamedTuple):
    """What ``_session_view`` reads of a session: a new one's, before it is stored."""

    id: str
    traceset_id: str
    part_size: int
    expires_at: datetime


class _SessionFields(Protocol):
    """What ``_session_view`` reads of a session (a stored one, or a ``_NewSession``)."""

    @property
    def id(self) -> str: ...
    @property
    def traceset_id(self) -> str: ...
    @property
    def part_size(self) -> int: ...
    @property
    def expires_at(self) -> datetime: ...


def _session_view(
    services: Services,
    upload: _SessionFields,
    files: Sequence[tuple[str, StagedFile]],
    base_url: str,
    *,
    with_received: bool,
    with_urls: bool = True,
    from_part: int = 1,
    traceset_expiry: tuple[datetime | None, int],
) -> schemas.UploadUrlResponse:
    now = services.now()
    urls_expire = min(now + services.settings.part_url_ttl, upload.expires_at)
    stages = [stage for _, stage in files]
    held = services.store.list_parts(stages) if with_received else [{} for _ in stages]
    # Part URLs come in pages, so no answer grows with the upload: each file with parts
    # missing gets its first few missing ones, the resume route the next few.
    wanting = sum(1 for stage, got in zip(stages, held, strict=True) if len(got) < stage.part_count)
    per_file = max(1, services.settings.part_urls_per_answer // max(1, wanting))
    out = []
    for (name, stage), received in zip(files, held, strict=True):
        missing = [n for n in range(from_part, stage.part_count + 1) if n not in received]
        out.append(
            schemas.FileUploadUrls(
                name=name,
                size=stage.size,
                part_urls_expire_at=urls_expire,
                parts=[
                    schemas.PartUploadUrl(
                        part_number=n,
                        size=stage.part_length(n),
                        url=services.store.part_url(stage, n, urls_expire, base_url=base_url),
                    )
                    for n in (missing[:per_file] if with_urls else ())
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
        traceset_expires_at=traceset_expiry[0],
        ttl_days=traceset_expiry[1],
    )
