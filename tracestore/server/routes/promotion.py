"""Promotion of a traceset one scope up (the use case is ``promotion.promote_traceset``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from tracestore import schemas
from tracestore.server import promotion
from tracestore.server.deps import ERROR_RESPONSES, PrincipalDep, ServicesDep

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)

_PROMOTE_BODY = {
    "requestBody": {
        "required": False,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/PromoteRequest"}}
        },
    }
}
_PROMOTE_ERRORS: dict[int | str, dict[str, object]] = {
    412: {
        "model": schemas.ErrorEnvelope,
        "description": "Not one step up, or no workloadMetadata at all",
    },
    422: {
        "model": schemas.ErrorEnvelope,
        "description": "workloadMetadata fails promotion's checks (typed model, rank-count guard)",
    },
}


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
    services: ServicesDep,
    principal: PrincipalDep,
) -> schemas.PromoteAnswer:
    """Promote a ready traceset one scope up (workspace → tenant → public), optionally
    replacing its workloadMetadata, description and tags; a promoted traceset no longer
    expires. Already at the target: 200 with ``promotionApplied: false``, nothing changed."""
    body = await request.body()
    return await run_in_threadpool(
        promotion.promote_traceset, services, principal, traceset_id, body
    )
