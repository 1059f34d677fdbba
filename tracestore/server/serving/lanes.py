"""The requests clients send hardest, answered in plain ASGI ahead of FastAPI's routing and
dependency solving (``request_context.RequestContext`` takes them, as it takes ``GET
/healthz``): the reads clients poll (a traceset by id, a page of the list), upload-url, which starts
every upload, and the embedded store's part PUT, which every file of an upload makes at
least once.

FastAPI's middleware, router and request handler cost as much as these routes' use cases
themselves (bench/request_cpu.py; docs/benchmarks-journal.md). A lane does what the route does (the
same token check, the same use case, the same answer and error envelopes) and nothing
else; the routes stay, for the OpenAPI document and for every request a lane does not
take. A lane is declared once, by its route: ``app.create_app`` pairs each laned route with
its taker here (``Lanes``), which takes the route's method and path, so the two cannot
drift apart; both call the same use case (``tracesets.get_traceset``, ``pages.list_page``,
``uploads.upload_url_text``, ``receiving.put_part``). tests/test_lanes.py and
tests/test_part_lane.py hold each lane's answers to the route's, byte for byte."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any, cast

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from tracestore.errors import ValidationError
from tracestore.server import presigned, receiving, tracesets, uploads
from tracestore.server.deps import Caller, bearer_token
from tracestore.server.listing import pages
from tracestore.server.services import Services
from tracestore.server.serving.body_protocol import receive_into
from tracestore.server.storage.local import LocalBlobStore

log = logging.getLogger("tracestore")
GONE_MID_BODY = "The connection closed before the request body was complete"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
# A lane's answer: the JSON text of a 200, or (the part PUT's) the whole response.
Lane = Callable[[Services], Awaitable[str | Response]]
# What takes a request of its route's method and path: from the scope, the receive (the
# body limited by ``RequestContext``) and the path's parameters in order, the lane, or None
# for the router (which words the refusal of a request the lane does not read as it would).
Taker = Callable[[Scope, Receive, Sequence[str]], Lane | None]


class Lanes:
    """The lanes of one app: each taker on its route's method and path template (a fixed
    path, or a fixed prefix and then one ``{parameter}`` per segment, as the router matches
    ``{name}``: one segment, not empty)."""

    def __init__(self, routes: Iterable[tuple[str, str, Taker]]) -> None:
        self._fixed: dict[tuple[str, str], Taker] = {}
        self._templated: list[tuple[str, str, int, Taker]] = []
        self.routes: list[tuple[str, str]] = []
        for method, path, taker in routes:
            self.routes.append((method, path))
            prefix, brace, rest = path.partition("{")
            if not brace:
                self._fixed[method, path] = taker
                continue
            names = ("{" + rest).split("/")
            if not prefix.endswith("/") or not all(_PARAMETER.fullmatch(n) for n in names):
                raise ValueError(f"a lane takes a fixed prefix and whole segments, not {path}")
            self._templated.append((method, prefix, len(names), taker))

    def lane_of(self, scope: Scope, receive: Receive) -> Lane | None:
        """The lane of a request, or None for FastAPI to route it; none with a root path
        (behind a mount the router would judge the path)."""
        if scope.get("root_path"):
            return None
        found = self.match(scope.get("method", ""), scope.get("path", ""))
        return None if found is None else found[0](scope, receive, found[1])

    def match(self, method: str, path: str) -> tuple[Taker, Sequence[str]] | None:
        """The taker of a method and path, and the path's parameters; None when no lane's
        route matches them."""
        taker = self._fixed.get((method, path))
        if taker is not None:
            return taker, ()
        for laned, prefix, count, taker in self._templated:
            if method == laned and path.startswith(prefix):
                parameters = path[len(prefix) :].split("/")
                if len(parameters) == count and all(parameters):
                    return taker, parameters
        return None


_PARAMETER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def traceset(scope: Scope, receive: Receive, parameters: Sequence[str]) -> Lane:
    """``GET /api/v1/tracesets/{traceset_id}``."""
    (traceset_id,) = parameters
    return lambda services: _caller(services, scope).read(tracesets.get_traceset, traceset_id)


def tracesets_page(scope: Scope, receive: Receive, parameters: Sequence[str]) -> Lane:
    """``GET /api/v1/tracesets``: its query's parameters as Request.query_params reads them."""
    query = QueryParams(scope.get("query_string", b"")).multi_items()
    return lambda services: _caller(services, scope).read(pages.list_page, query)


def upload_url(scope: Scope, receive: Receive, parameters: Sequence[str]) -> Lane:
    """``POST /api/v1/tracesets/upload-url``."""
    return lambda services: _upload_url(services, scope, receive)


async def _upload_url(services: Services, scope: Scope, receive: Receive) -> str:
    caller = _caller(services, scope)  # a missing token is a 401 before the body is read
    # A client gone mid-body (ClientDisconnect) is the app's handler's, as for the route.
    body = await Request(scope, receive).body()
    origin = presigned.request_origin(scope, services.settings)
    return await uploads.upload_url_text(caller, body, origin)


# A part URL's integers as the route takes them without a question (pydantic reads
# "007" as 7, as int does); any other spelling is the route's to judge.
_DIGITS = re.compile(r"[0-9]{1,18}")


def part(scope: Scope, receive: Receive, parameters: Sequence[str]) -> Lane | None:
    """The embedded store's part PUT (its route is mounted only with that store): a PUT
    whose two numbers are digits, and whose query holds every integer as digits and a
    signature. Anything else, even a malformed query, goes to the router, which words its
    refusal."""
    upload_id, position, part_number = parameters
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
    scope: Scope,
    receive: Receive,
    grant: presigned.PartGrant,
    signature: str,
) -> Response:
    request = Request(scope, receive)
    etag = await receiving.put_part(
        services,
        cast(LocalBlobStore, services.store),
        grant,
        signature,
        request.headers.get("content-length"),
        request.stream(),
        request.headers.get("x-amz-checksum-sha256"),
        into=receive_into(scope),
    )
    return Response(status_code=200, headers={"ETag": etag})


def client_gone(request_id: str | None) -> ValidationError:
    """The error of a client gone mid-body (app's ClientDisconnect handler's, which answers
    a route's and a lane's), logged in one line: its own business, not a server error."""
    log.info("request %s: the client went away mid-body", request_id)
    return ValidationError(GONE_MID_BODY)


def _caller(services: Services, scope: Scope) -> Caller:
    # The first Authorization header, as Request.headers.get reads it.
    authorization = next(
        (value.decode("latin-1") for key, value in scope["headers"] if key == b"authorization"),
        None,
    )
    return Caller(services, bearer_token(authorization))
