"""An upload: start it (part URLs), resume it, complete it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from tracestore import schemas
from tracestore.server import completion, uploads
from tracestore.server.deps import (
    API_ERRORS,
    BaseUrlDep,
    CallerDep,
    PrincipalDep,
    ServicesDep,
    error_responses,
)
from tracestore.server.presigned import request_origin

router = APIRouter(prefix="/api/v1")

_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/TracesetUploadUrlRequest"}
            }
        },
    }
}

_CENSUS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/UploadCensusRequest"}}
        },
    }
}


@router.post(
    "/tracesets/upload-url",
    response_model=schemas.UploadUrlResponse,
    openapi_extra=_UPLOAD_BODY,
    tags=["uploads"],
    responses=error_responses(
        400,
        403,
        413,
        *API_ERRORS,
        s403="workspaceId names a workspace the caller is not a member of",
        s413="The body, or its workloadMetadata, is larger than allowed",
    ),
)
async def request_upload_urls(request: Request, caller: CallerDep) -> Response:
    """Start an upload: check the request and its workloadMetadata, create the traceset
    (status ``uploading``) and answer presigned part URLs for every file."""
    body = await request.body()
    origin = request_origin(request.scope, caller.services.settings)
    return Response(
        await uploads.upload_url_text(caller, body, origin), media_type="application/json"
    )


@router.post(
    "/tracesets/upload-url/complete",
    response_model=schemas.Traceset,
    status_code=201,
    tags=["uploads"],
    responses={
        200: {"model": schemas.Traceset, "description": "Already completed (retry)"},
        **error_responses(
            400,
            404,
            409,
            410,
            413,
            *API_ERRORS,
            s400="A part or file does not match what was sent (ETag, size, SHA-256)",
            s409="The session has failed, or another completion holds it",
            s410="The session has expired",
            s413="A file holds more bytes than it declared, or the body is too large",
        ),
    },
)
def complete_upload(
    body: schemas.CompleteRequest, services: ServicesDep, principal: PrincipalDep
) -> Response:
    """Complete an upload: verify every part and file, store the bytes, set ``ready``.
    201 the first time, 200 with the same body on a retry."""
    text, created = completion.complete_upload(services, principal, body)
    return Response(text, status_code=201 if created else 200, media_type="application/json")


@router.get(
    "/tracesets/upload-url/{upload_id}",
    response_model=schemas.UploadSessionResponse,
    tags=["uploads"],
    responses=error_responses(
        400,
        404,
        409,
        410,
        *API_ERRORS,
        s404="No such session of the caller's, or no such file in it",
        s409="The session has failed",
        s410="The session has expired",
    ),
)
def resume_upload(
    upload_id: str,
    services: ServicesDep,
    principal: PrincipalDep,
    base_url: BaseUrlDep,
    file: Annotated[str | None, Query(description="Only this file")] = None,
    from_part: Annotated[
        int, Query(alias="fromPart", ge=1, description="With file: its parts from this one on")
    ] = 1,
) -> schemas.UploadSessionResponse:
    """Resume an upload: the parts already received, and fresh URLs for the first of those
    missing (a page; ``file`` and ``fromPart`` ask for the next page of one file)."""
    return uploads.resume_upload(services, principal, upload_id, base_url, file, from_part)


@router.post(
    "/tracesets/upload-url/check",
    response_model=schemas.UploadCheckAnswer,
    openapi_extra=_UPLOAD_BODY,
    tags=["uploads"],
    responses=error_responses(
        400,
        403,
        413,
        *API_ERRORS,
        s400="upload-url would refuse the body: its error, word for word",
        s403="workspaceId names a workspace the caller is not a member of",
        s413="The body, or the files it declares, is larger than upload-url takes",
    ),
)
async def check_upload_url(request: Request, caller: CallerDep) -> schemas.UploadCheckAnswer:
    """upload-url's dry run (an extension): the same body, the same checks and refusals,
    nothing created; ``valid`` when upload-url would accept it. Safe to send again."""
    return await uploads.upload_check_answer(caller, await request.body())


@router.post(
    "/tracesets/upload-url/census",
    response_model=schemas.UploadCensusAnswer,
    openapi_extra=_CENSUS_BODY,
    tags=["uploads"],
    responses=error_responses(
        400,
        413,
        *API_ERRORS,
        s400="A malformed body, or workloadMetadata upload-url would refuse: its error",
        s413="The body is larger than TRACESTORE_MAX_JSON_BODY",
    ),
)
async def census_before_upload(request: Request, caller: CallerDep) -> schemas.UploadCensusAnswer:
    """The rank census of files not uploaded yet (an extension), from each one's first
    bytes: what ``tracestore upload`` warns of before it sends, for a browser, which has
    only the files. Creates nothing; safe to send again."""
    return await caller.run(uploads.upload_census, await request.body())
