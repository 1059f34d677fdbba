"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Response

from tracestore import schemas
from tracestore.server.deps import ServicesDep
from tracestore.server.serving.request_context import ALIVE, LIVENESS_PATH

router = APIRouter(tags=["health"])


@router.get(LIVENESS_PATH, response_model=schemas.Health)
async def healthz() -> Response:
    """Liveness: the process answers."""
    # What the OpenAPI document describes; requests are answered ahead of the router
    # (serving.request_context.answer_alive).
    return Response(ALIVE, media_type="application/json")


@router.get(
    "/readyz", response_model=schemas.Health, responses={503: {"model": schemas.ErrorEnvelope}}
)
def readyz(services: ServicesDep) -> schemas.Health:
    """Readiness: the database and the blob store answer."""
    return schemas.Health(status="ok", checks=services.readiness())
