"""The reads clients poll hardest, a traceset by id and a page of the list, answered in
plain ASGI ahead of FastAPI's routing and dependency solving (``app.RequestContext`` takes
them, as it takes ``GET /healthz``).

FastAPI's middleware, router and request handler cost as much as these routes' use cases
themselves (bench/request_cpu.py; docs/benchmarks.md). A lane does what the route does (the
same token check, the same use case, the same answer and error envelopes) and nothing
else; the routes stay, for the OpenAPI document and for every request a lane does not
take. tests/test_lanes.py holds each lane's answers to the route's, byte for byte."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.datastructures import QueryParams

from tracestore.server import tracesets
from tracestore.server.deps import Caller, bearer_token
from tracestore.server.routes.listing import page as list_page
from tracestore.server.services import Services

# The routes' paths (routes/listing.py, routes/tracesets.py under their /api/v1 prefix).
LIST_PATH = "/api/v1/tracesets"
ITEM_PREFIX = "/api/v1/tracesets/"

Lane = Callable[[Services], Awaitable[str]]


def read_lane(scope: MutableMapping[str, Any]) -> Lane | None:
    """The lane of a request, or None for FastAPI to route it: only a GET of the list or of
    one traceset, with no root path (behind a mount the router would judge the path)."""
    if scope.get("method") != "GET" or scope.get("root_path"):
        return None
    path = scope.get("path", "")
    if path == LIST_PATH:
        # As Request.query_params reads them.
        parameters = QueryParams(scope.get("query_string", b"")).multi_items()
        return lambda services: _caller(services, scope).read(list_page, parameters)
    if path.startswith(ITEM_PREFIX):
        traceset_id = path[len(ITEM_PREFIX) :]
        # The route's {traceset_id}: one path segment, not empty (Starlette's str).
        if traceset_id and "/" not in traceset_id:
            return lambda services: _caller(services, scope).read(
                tracesets.get_traceset, traceset_id
            )
    return None


def _caller(services: Services, scope: MutableMapping[str, Any]) -> Caller:
    # The first Authorization header, as Request.headers.get reads it.
    authorization = next(
        (value.decode("latin-1") for key, value in scope["headers"] if key == b"authorization"),
        None,
    )
    return Caller(services, bearer_token(authorization))
