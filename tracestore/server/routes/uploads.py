"""An upload: start it (part URLs), resume it, complete it."""

from __future__ import annotations

import asyncio
import weakref
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from tracestore import schemas
from tracestore.server import completion, deps, uploads
from tracestore.server.auth import Principal
from tracestore.server.deps import (
    API_ERRORS,
    BaseUrlDep,
    CallerDep,
    PrincipalDep,
    ServicesDep,
    error_responses,
)
from tracestore.server.routes.tracesets import TracesetResponse
from tracestore.server.services import Services

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
    return Response(await answer_upload_url(caller, body, request), media_type="application/json")


# Bodies up to this size are parsed where the start's one write runs (the event loop's thread
# on SQLite, ``Caller.write``); larger ones in a worker thread, one at a time per process:
# 16 MiB of JSON held the loop for seconds (issue 41), and its values take up to twenty
# times its size in memory while parsed. Real uploads of a few hundred files are under it.
INLINE_BODY = 64 * 1024


async def answer_upload_url(caller: deps.Caller, body: bytes, request: Request) -> str:
    """upload-url's answer to ``body`` (the route's, and ``lanes``'): off the event loop and
    one at a time when the body is larger than ``INLINE_BODY``."""
    if len(body) <= INLINE_BODY:
        return await caller.write(upload_url_answer, body, request)
    async with _big_bodies():
        return await caller.run(upload_url_answer, body, request)


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


def upload_url_answer(
    services: Services, principal: Principal, body: bytes, request: Request
) -> str:
    """upload-url's answer, as JSON text (the route's, and ``lanes``' of it)."""
    # The base URL after the token's check: a bad token is a 401 whatever the Host says.
    answer = uploads.start_upload(
        services, principal, body, deps.base_url(request, services.settings)
    )
    # Written here, in the request's thread, by pydantic's compiled serializer: FastAPI
    # validated the returned model again and serialized it, on the event loop, a tenth of
    # the request. The same text (tests/test_request_path.py).
    return answer.model_dump_json(by_alias=True)


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
    return TracesetResponse(text, status_code=201 if created else 200)


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
    body = await request.body()
    if len(body) <= INLINE_BODY:
        return await caller.read(uploads.check_upload, body)
    async with _big_bodies():  # parsed as upload-url parses it: one big body at a time
        return await caller.run(uploads.check_upload, body)
