"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter

from tracestore import schemas
from tracestore.server.deps import ServicesDep

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=schemas.Health)
async def healthz() -> schemas.Health:
    """Liveness: the process answers."""
    return schemas.Health(status="ok")


@router.get(
    "/readyz", response_model=schemas.Health, responses={503: {"model": schemas.ErrorEnvelope}}
)
def readyz(services: ServicesDep) -> schemas.Health:
    """Readiness: the database and the blob store answer."""
    return schemas.Health(status="ok", checks=services.readiness())
