"""HTTP routes for bytes going out: download URLs, the archive stream, resolve, validate.

The use cases are in ``downloads.py``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from tracestore import schemas
from tracestore.server import downloads
from tracestore.server.auth import Principal
from tracestore.server.blobs import content_disposition
from tracestore.server.deps import authenticated, services_of
from tracestore.server.routes import ERROR_RESPONSES
from tracestore.server.services import Services

ServicesDep = Annotated[Services, Depends(services_of)]
PrincipalDep = Annotated[Principal, Depends(authenticated)]

api = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["downloads"])
blobs = APIRouter(prefix="/blobs", tags=["embedded blob store"])
router = APIRouter()


@api.get("/tracesets/{traceset_id}/download", response_model=schemas.DownloadAnswer)
def download_traceset(
    traceset_id: str,
    services: ServicesDep,
    principal: PrincipalDep,
    file: Annotated[
        str | None,
        Query(description="A file of the traceset; without it, a URL for a ZIP of every file"),
    ] = None,
) -> schemas.DownloadAnswer:
    """A presigned URL to GET one file, or a ZIP (zip64, stored) of the whole traceset.
    The URL needs no bearer token; it expires. Resets the traceset's TTL."""
    return downloads.download_url(services, principal, traceset_id, file)


@api.get("/tracesets/{traceset_id}/resolve", response_model=schemas.ResolveAnswer)
def resolve_traceset(
    traceset_id: str, services: ServicesDep, principal: PrincipalDep
) -> schemas.ResolveAnswer:
    """Where each file's bytes are (``s3://`` or ``file://``), for a host that reads the
    store directly. Resets the traceset's TTL."""
    return downloads.resolve_traceset(services, principal, traceset_id)


@api.post("/tracesets/{traceset_id}/validate", response_model=schemas.ValidateAnswer)
def validate_traceset(
    traceset_id: str, services: ServicesDep, principal: PrincipalDep
) -> schemas.ValidateAnswer:
    """Re-read every blob and re-verify sizes and SHA-256; check the metadata declares a
    rank count; report inspection's rank census (``passed: null`` until it has run)."""
    return downloads.validate_traceset(services, principal, traceset_id)


@blobs.get(
    "/archive/{traceset_id}",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/zip": {}}, "description": "The ZIP archive"}},
)
def get_archive(
    traceset_id: str, services: ServicesDep, expires: int, signature: str
) -> StreamingResponse:
    """Stream the ZIP of every file of a traceset through a presigned archive URL."""
    archive = downloads.open_archive(services, traceset_id, expires, signature)
    return StreamingResponse(
        archive.chunks,
        media_type="application/zip",
        headers={
            "Content-Length": str(archive.size),
            "Content-Disposition": content_disposition(archive.filename),
        },
    )


router.include_router(api)
router.include_router(blobs)
