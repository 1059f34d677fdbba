"""Promotion of a traceset one scope up (the use case is ``promotion.promote_traceset``)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from tracestore import schemas
from tracestore.server import promotion
from tracestore.server.deps import API_ERRORS, CallerDep, error_responses

router = APIRouter(prefix="/api/v1")

_PROMOTE_BODY = {
    "requestBody": {
        "required": False,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/PromoteRequest"}}
        },
    }
}
_PROMOTE_ERRORS = error_responses(
    400,
    403,
    404,
    409,
    410,
    412,
    413,
    422,
    *API_ERRORS,
    s403="Promotion to public needs a tenant admin",
    s409="The traceset is not ready, or fails its census (give force to promote it anyway)",
    s410="The traceset has expired",
    s412="Not one step up, or no workloadMetadata at all",
    s422="workloadMetadata fails promotion's checks (typed model, rank-count guard)",
)


@router.post(
    "/tracesets/{traceset_id}/promote",
    response_model=schemas.PromoteAnswer,
    openapi_extra=_PROMOTE_BODY,
    responses=_PROMOTE_ERRORS,
    tags=["tracesets"],
)
async def promote_traceset(
    traceset_id: str,
    request: Request,
    caller: CallerDep,
) -> schemas.PromoteAnswer:
    """Promote a ready traceset one scope up (workspace → tenant → public), optionally
    replacing its workloadMetadata, description and tags; a promoted traceset no longer
    expires. Already at the target: 200 with ``promotionApplied: false``, nothing changed."""
    body = await request.body()
    return await caller.run(promotion.promote_traceset, traceset_id, body)
