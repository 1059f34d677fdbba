"""The requests clients send hardest, answered in plain ASGI ahead of FastAPI's routing and
dependency solving (``request_context.RequestContext`` takes them, as it takes ``GET
/healthz``): the reads clients poll (a traceset by id, a page of the list), upload-url, which starts
every upload, and the embedded store's part PUT, which every file of an upload makes at
least once.

FastAPI's middleware, router and request handler cost as much as these routes' use cases
themselves (bench/request_cpu.py; docs/benchmarks.md). A lane does what the route does (the
same token check, the same use case, the same answer and error envelopes) and nothing
else; the routes stay, for the OpenAPI document and for every request a lane does not
take. tests/test_lanes.py and tests/test_part_lane.py hold each lane's answers to the
route's, byte for byte."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from tracestore.errors import ValidationError
from tracestore.server import presigned, tracesets
from tracestore.server.deps import Caller, bearer_token
from tracestore.server.routes.blobs import part_answer
from tracestore.server.routes.listing import page as list_page
from tracestore.server.routes.uploads import answer_upload_url
from tracestore.server.services import Services
from tracestore.server.storage.local import LocalBlobStore

# The routes' paths (routes/listing.py, routes/tracesets.py under their /api/v1 prefix).
LIST_PATH = "/api/v1/tracesets"
ITEM_PREFIX = "/api/v1/tracesets/"
UPLOAD_PATH = "/api/v1/tracesets/upload-url"  # routes/uploads.py
PART_PREFIX = presigned.PREFIX + presigned.PART.split("{")[0]  # routes/blobs.py
log = logging.getLogger("tracestore")
GONE_MID_BODY = "The connection closed before the request body was complete"

# A lane's answer: the JSON text of a 200, or (the part PUT's) the whole response.
Lane = Callable[[Services], Awaitable[str | Response]]
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


# A part URL's integers as the route takes them without a question (pydantic reads
# "007" as 7, as int does); any other spelling is the route's to judge.
_DIGITS = re.compile(r"[0-9]{1,18}")


def part_lane_of(scope: MutableMapping[str, Any], receive: Receive) -> Lane | None:
    """The lane of a part PUT to the embedded store (``RequestContext`` asks only when that
    store's routes are mounted), or None for the route: a PUT whose path is three segments
    under ``PART_PREFIX``, its two numbers digits, and whose query holds every integer as
    digits and a signature. Anything else, even a malformed query, goes to the router,
    which words its refusal."""
    path = scope.get("path", "")
    if scope.get("method") != "PUT" or scope.get("root_path") or not path.startswith(PART_PREFIX):
        return None
    segments = path[len(PART_PREFIX) :].split("/")
    if len(segments) != 3 or not segments[0]:
        return None
    upload_id, position, part_number = segments
    query = QueryParams(scope.get("query_string", b""))  # the last of a repeated name, as the route
    numbers = (position, part_number, *(query.get(k) for k in ("size", "partSize", "expires")))
    signature = query.get("signature")
    if signature is None or not all(n is not None and _DIGITS.fullmatch(n) for n in numbers):
        return None
    size, part_size, expires = (int(cast(str, n)) for n in numbers[2:])
    grant = presigned.PartGrant(
        upload_id, int(position), int(part_number), size, part_size, expires
    )
    return lambda services: _put_part(services, scope, receive, grant, signature)


async def _put_part(
    services: Services,
    scope: MutableMapping[str, Any],
    receive: Receive,
    grant: presigned.PartGrant,
    signature: str,
) -> Response:
    request = Request(scope, receive)
    checksum = request.headers.get("x-amz-checksum-sha256")
    store = cast(LocalBlobStore, services.store)
    return await part_answer(services, store, grant, signature, request, checksum)


async def _upload_url(services: Services, scope: MutableMapping[str, Any], receive: Receive) -> str:
    caller = _caller(services, scope)  # a missing token is a 401 before the body is read
    request = Request(scope, receive)
    # A client gone mid-body (ClientDisconnect) is the app's handler's, as for the route.
    body = await request.body()
    return await answer_upload_url(caller, body, request)


def client_gone(request_id: str | None) -> ValidationError:
    """The error of a client gone mid-body (app's ClientDisconnect handler's, which answers
    a route's and a lane's), logged in one line: its own business, not a server error."""
    log.info("request %s: the client went away mid-body", request_id)
    return ValidationError(GONE_MID_BODY)


def _caller(services: Services, scope: MutableMapping[str, Any]) -> Caller:
    # The first Authorization header, as Request.headers.get reads it.
    authorization = next(
        (value.decode("latin-1") for key, value in scope["headers"] if key == b"authorization"),
        None,
    )
    return Caller(services, bearer_token(authorization))
