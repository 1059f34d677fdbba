"""HTTP only: parse, call one use case, answer a schema."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from tracestore import schemas
from tracestore.errors import NotImplementedByService
from tracestore.server import completion, tracesets, uploads
from tracestore.server.auth import Principal
from tracestore.server.blobs import LocalBlobStore, content_disposition
from tracestore.server.deps import authenticated, services_of
from tracestore.server.protocol import receive_into
from tracestore.server.services import Services

ServicesDep = Annotated[Services, Depends(services_of)]
PrincipalDep = Annotated[Principal, Depends(authenticated)]

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": schemas.ErrorEnvelope, "description": description}
    for status, description in (
        (400, "Validation error"),
        (401, "Invalid or missing authentication token"),
        (403, "Forbidden"),
        (404, "Not found"),
        (409, "Conflict"),
        (410, "Gone"),
        (413, "Payload too large"),
        (500, "Internal error"),
    )
}

api = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)
blobs = APIRouter(prefix="/blobs", tags=["embedded blob store"])
health = APIRouter(tags=["health"])

TRACESET_JSON = "application/json"


class TracesetResponse(Response):
    media_type = TRACESET_JSON


def _traceset_response(view: schemas.Traceset, status: int = 200) -> Response:
    return TracesetResponse(tracesets.render_traceset(view), status_code=status)


_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/UploadRequest"}}},
    }
}


@api.post(
    "/tracesets/upload-url",
    response_model=schemas.UploadUrlResponse,
    openapi_extra=_UPLOAD_BODY,
    tags=["uploads"],
)
async def request_upload_urls(
    request: Request, services: ServicesDep, principal: PrincipalDep
) -> schemas.UploadUrlResponse:
    """Start an upload: check the request and its workloadMetadata, create the traceset
    (status ``uploading``) and answer presigned part URLs for every file."""
    body = await request.body()
    return await run_in_threadpool(uploads.start_upload, services, principal, body)


@api.post(
    "/tracesets/upload-url/complete",
    response_model=schemas.Traceset,
    status_code=201,
    tags=["uploads"],
    responses={200: {"model": schemas.Traceset, "description": "Already completed (retry)"}},
)
def complete_upload(
    body: schemas.CompleteRequest, services: ServicesDep, principal: PrincipalDep
) -> Response:
    """Complete an upload: verify every part and file, store the bytes, set ``ready``.
    201 the first time, 200 with the same body on a retry."""
    view, created = completion.complete_upload(services, principal, body)
    return _traceset_response(view, 201 if created else 200)


@api.get(
    "/tracesets/upload-url/{upload_id}",
    response_model=schemas.UploadSessionResponse,
    tags=["uploads"],
)
def resume_upload(
    upload_id: str, services: ServicesDep, principal: PrincipalDep
) -> schemas.UploadSessionResponse:
    """Resume an upload: the parts already received, and fresh URLs for those missing."""
    return uploads.resume_upload(services, principal, upload_id)


@api.post("/tracesets", status_code=501, tags=["tracesets"])
def create_traceset_directly(principal: PrincipalDep) -> None:
    """Not offered: tracesets are created through ``POST /api/v1/tracesets/upload-url``."""
    raise NotImplementedByService(
        "Create tracesets with POST /api/v1/tracesets/upload-url, then complete the upload "
        "with POST /api/v1/tracesets/upload-url/complete"
    )


@api.get("/tracesets/{traceset_id}", response_model=schemas.Traceset, tags=["tracesets"])
def get_traceset(traceset_id: str, services: ServicesDep, principal: PrincipalDep) -> Response:
    """A traceset with its files and its workloadMetadata exactly as given."""
    return _traceset_response(tracesets.get_traceset(services, principal, traceset_id))


@api.delete("/tracesets/{traceset_id}", status_code=204, tags=["tracesets"])
def delete_traceset(traceset_id: str, services: ServicesDep, principal: PrincipalDep) -> Response:
    """Soft-delete a traceset; bytes no other live traceset uses are purged after a grace."""
    tracesets.delete_traceset(services, principal, traceset_id)
    return Response(status_code=204)


# --- the embedded store's presigned URLs (no bearer token: the signature is the grant) ---


@blobs.put(
    "/parts/{upload_id}/{position}/{part_number}",
    status_code=200,
    responses={200: {"description": "Stored; the ETag header names the part"}},
)
async def put_part(
    request: Request,
    services: ServicesDep,
    upload_id: str,
    position: int,
    part_number: int,
    size: int,
    expires: int,
    signature: str,
    part_size: Annotated[int, Query(alias="partSize")],
    checksum: Annotated[str | None, Header(alias="x-amz-checksum-sha256")] = None,
) -> Response:
    """Receive one part of an upload, written to disk as it arrives."""
    writer = await run_in_threadpool(
        uploads.open_part,
        services,
        upload_id,
        position,
        part_number,
        size,
        part_size,
        expires,
        signature,
        request.headers.get("content-length"),
    )
    etag = await uploads.receive_part(
        writer, request.stream(), checksum, into=receive_into(request.scope)
    )
    return Response(status_code=200, headers={"ETag": f'"{etag}"'})


class BlobResponse(FileResponse):
    # Each chunk is a thread hop; Starlette's 64 KiB default spends more on hops than on bytes.
    chunk_size = 1024 * 1024


@blobs.get("/content/{sha256}", response_class=FileResponse)
def get_blob(
    sha256: str, services: ServicesDep, name: str, expires: int, signature: str
) -> FileResponse:
    """Serve a blob through a presigned download URL (range requests supported)."""
    store = services.store
    if not isinstance(store, LocalBlobStore):
        raise NotImplementedByService("This service does not serve blobs itself")
    store.verify_download_url(sha256, name, expires, signature, services.now())
    path = store.root / store.blob_key(sha256)
    return BlobResponse(
        path,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": content_disposition(name),
            "ETag": f'"{sha256}"',
            "x-amz-meta-sha256": sha256,
        },
    )


@health.get("/healthz", response_model=schemas.Health)
def healthz() -> schemas.Health:
    """Liveness: the process answers."""
    return schemas.Health(status="ok")


@health.get(
    "/readyz", response_model=schemas.Health, responses={503: {"model": schemas.ErrorEnvelope}}
)
def readyz(services: ServicesDep) -> schemas.Health:
    """Readiness: the database and the blob store answer."""
    return schemas.Health(status="ok", checks=services.readiness())
