"""Liveness and readiness."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import APIRouter, Response

from tracestore import schemas
from tracestore.server.deps import ServicesDep

router = APIRouter(tags=["health"])

LIVENESS_PATH = "/healthz"
_ALIVE = schemas.Health(status="ok").model_dump_json(by_alias=True).encode()


async def answer_alive(send: Callable[[MutableMapping[str, Any]], Awaitable[None]]) -> None:
    """The liveness answer in plain ASGI. ``serving.request_context.RequestContext`` sends it
    for every ``GET /healthz`` ahead of the framework's middleware and routing: a probe that
    load balancers poll should cost what the server stack costs, not what a route does."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(_ALIVE))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _ALIVE})


@router.get(LIVENESS_PATH, response_model=schemas.Health)
async def healthz() -> Response:
    """Liveness: the process answers."""
    # What the OpenAPI document describes; requests are answered by answer_alive.
    return Response(_ALIVE, media_type="application/json")


@router.get(
    "/readyz", response_model=schemas.Health, responses={503: {"model": schemas.ErrorEnvelope}}
)
def readyz(services: ServicesDep) -> schemas.Health:
    """Readiness: the database and the blob store answer."""
    return schemas.Health(status="ok", checks=services.readiness())
