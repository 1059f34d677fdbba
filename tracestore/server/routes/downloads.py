"""Bytes going out, through the API: download URLs, resolve, validate (the use cases are in
``downloads.py``; the archive stream itself is a presigned route, ``routes/blobs.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tracestore import schemas
from tracestore.server import downloads
from tracestore.server.deps import (
    API_ERRORS,
    BaseUrlDep,
    PrincipalDep,
    ServicesDep,
    error_responses,
)

router = APIRouter(prefix="/api/v1", tags=["downloads"])
_NOT_READY = "The traceset is not ready"
_EXPIRED = "The traceset has expired (it is deleted at the next sweep)"


@router.get(
    "/tracesets/{traceset_id}/download",
    response_model=schemas.DownloadAnswer,
    responses=error_responses(
        400,
        404,
        409,
        410,
        *API_ERRORS,
        s400="A bad Host or X-Forwarded-* header (the URL's base)",
        s404="No such traceset visible to the caller, or no such file in it",
        s409=_NOT_READY,
        s410=_EXPIRED,
    ),
)
def download_traceset(
    traceset_id: str,
    services: ServicesDep,
    principal: PrincipalDep,
    base_url: BaseUrlDep,
    file: Annotated[
        str | None,
        Query(
            description="A file of the traceset; without it, a URL for a ZIP of every file. "
            "Not with ranks (one or the other: a 400)"
        ),
    ] = None,
    ranks: Annotated[
        str | None,
        Query(
            description="Ranks and ranges (0-7,12): a ZIP of just the files holding them, "
            "with _tracestore/manifest.json (per file: its ranks, the ones asked for, size, "
            "SHA-256, format). Not with file (one or the other: a 400)"
        ),
    ] = None,
    supporting: Annotated[
        bool, Query(description="With ranks: add the supporting files to the ZIP")
    ] = False,
) -> schemas.DownloadAnswer:
    """A presigned URL to GET one file, or a ZIP (zip64, stored) of the whole traceset or
    of some ranks' files. The URL needs no bearer token; it expires. Resets the traceset's
    TTL. An unknown rank or a malformed list is a 400 naming it."""
    return downloads.download_url(
        services, principal, traceset_id, file, base_url, ranks, supporting
    )


@router.get(
    "/tracesets/{traceset_id}/resolve",
    response_model=schemas.ResolveAnswer,
    responses=error_responses(404, 409, 410, *API_ERRORS, s409=_NOT_READY, s410=_EXPIRED),
)
def resolve_traceset(
    traceset_id: str, services: ServicesDep, principal: PrincipalDep
) -> schemas.ResolveAnswer:
    """Where each file's bytes are (``s3://`` or ``file://``), for a host that reads the
    store directly. Resets the traceset's TTL."""
    return downloads.resolve_traceset(services, principal, traceset_id)


@router.post(
    "/tracesets/{traceset_id}/validate",
    response_model=schemas.ValidateAnswer,
    responses=error_responses(404, 409, *API_ERRORS, s409=_NOT_READY),
)
def validate_traceset(
    traceset_id: str, services: ServicesDep, principal: PrincipalDep
) -> schemas.ValidateAnswer:
    """Re-read every blob and re-verify sizes and SHA-256; check the metadata declares a
    rank count; report inspection's rank census (``passed: null`` until it has run)."""
    return downloads.validate_traceset(services, principal, traceset_id)
