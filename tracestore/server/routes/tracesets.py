"""A traceset by id: read, edit, delete (and the refusal to create one outside an upload)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from tracestore import schemas
from tracestore.errors import NotImplementedByService
from tracestore.server import tracesets
from tracestore.server.deps import API_ERRORS, CallerDep, PrincipalDep, error_responses

router = APIRouter(prefix="/api/v1")


class TracesetResponse(Response):
    media_type = "application/json"


@router.post(
    "/tracesets",
    status_code=501,
    tags=["tracesets"],
    response_class=Response,
    responses=error_responses(
        501, *API_ERRORS, s501="Always: tracesets are created through an upload"
    ),
)
def create_traceset(principal: PrincipalDep) -> None:
    """Not offered: tracesets are created through ``POST /api/v1/tracesets/upload-url``."""
    raise NotImplementedByService(
        "Create tracesets with POST /api/v1/tracesets/upload-url, then complete the upload "
        "with POST /api/v1/tracesets/upload-url/complete"
    )


@router.get(
    "/tracesets/{traceset_id}",
    response_model=schemas.Traceset,
    tags=["tracesets"],
    responses=error_responses(404, *API_ERRORS),
)
async def get_traceset(traceset_id: str, caller: CallerDep) -> Response:
    """A traceset with its files and its workloadMetadata exactly as given."""
    return TracesetResponse(await caller.read(tracesets.get_traceset, traceset_id))


_EDIT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EditRequest"}}},
    }
}


@router.patch(
    "/tracesets/{traceset_id}",
    response_model=schemas.Traceset,
    openapi_extra=_EDIT_BODY,
    tags=["tracesets"],
    responses=error_responses(
        400,
        403,
        404,
        409,
        413,
        *API_ERRORS,
        s400="A member is invalid (as at upload), or the body changes nothing",
        s403="The caller may see the traceset but is neither its uploader nor a tenant admin",
        s409="The traceset is deleted",
    ),
)
async def edit_traceset(traceset_id: str, request: Request, caller: CallerDep) -> Response:
    """Change a traceset's name, description or tags (an extension): its uploader or an
    admin of its tenant. The edit is recorded (``editedAt``, ``editedBy``); the answer is
    the traceset as GET answers it."""
    body = await request.body()
    return TracesetResponse(await caller.run(tracesets.edit_traceset, traceset_id, body))


@router.delete(
    "/tracesets/{traceset_id}",
    status_code=204,
    tags=["tracesets"],
    response_class=Response,
    responses={
        204: {"description": "Deleted (or already deleted)"},
        **error_responses(404, *API_ERRORS, s404="No such traceset in a workspace of the caller's"),
    },
)
async def delete_traceset(traceset_id: str, caller: CallerDep) -> Response:
    """Soft-delete a traceset; bytes no other live traceset uses are purged after a grace."""
    await caller.run(tracesets.delete_traceset, traceset_id)
    return Response(status_code=204)
