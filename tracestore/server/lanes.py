"""The requests clients send hardest, answered in plain ASGI ahead of FastAPI's routing and
dependency solving (``app.RequestContext`` takes them, as it takes ``GET /healthz``): the
reads clients poll (a traceset by id, a page of the list) and upload-url, which starts
every upload.

FastAPI's middleware, router and request handler cost as much as these routes' use cases
themselves (bench/request_cpu.py; docs/benchmarks.md). A lane does what the route does (the
same token check, the same use case, the same answer and error envelopes) and nothing
else; the routes stay, for the OpenAPI document and for every request a lane does not
take. tests/test_lanes.py holds each lane's answers to the route's, byte for byte."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect, Request

from tracestore.errors import ValidationError
from tracestore.server import tracesets
from tracestore.server.deps import Caller, bearer_token
from tracestore.server.routes.listing import page as list_page
from tracestore.server.routes.uploads import upload_url_answer
from tracestore.server.services import Services

# The routes' paths (routes/listing.py, routes/tracesets.py under their /api/v1 prefix).
LIST_PATH = "/api/v1/tracesets"
ITEM_PREFIX = "/api/v1/tracesets/"
UPLOAD_PATH = "/api/v1/tracesets/upload-url"  # routes/uploads.py
log = logging.getLogger("tracestore")
GONE_MID_BODY = "The connection closed before the request body was complete"

Lane = Callable[[Services], Awaitable[str]]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


def lane_of(scope: MutableMapping[str, Any], receive: Receive) -> Lane | None:
    """The lane of a request, or None for FastAPI to route it: only a GET of the list or of
    one traceset, or a POST of upload-url, with no root path (behind a mount the router
    would judge the path). ``receive`` is ``RequestContext``'s, which limits the body."""
    method, path = scope.get("method"), scope.get("path", "")
    if scope.get("root_path"):
        return None
    if method == "POST" and path == UPLOAD_PATH:
        return lambda services: _upload_url(services, scope, receive)
    if method != "GET":
        return None
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


async def _upload_url(services: Services, scope: MutableMapping[str, Any], receive: Receive) -> str:
    caller = _caller(services, scope)  # a missing token is a 401 before the body is read
    request = Request(scope, receive)
    try:
        body = await request.body()
    except ClientDisconnect:
        raise client_gone(scope.get("state", {}).get("request_id")) from None
    return await caller.write(upload_url_answer, body, request)


def client_gone(request_id: str | None) -> ValidationError:
    """The error of a client gone mid-body (the route's, through app's ClientDisconnect
    handler, and a lane's), logged in one line: its own business, not a server error."""
    log.info("request %s: the client went away mid-body", request_id)
    return ValidationError(GONE_MID_BODY)


def _caller(services: Services, scope: MutableMapping[str, Any]) -> Caller:
    # The first Authorization header, as Request.headers.get reads it.
    authorization = next(
        (value.decode("latin-1") for key, value in scope["headers"] if key == b"authorization"),
        None,
    )
    return Caller(services, bearer_token(authorization))
