"""What every request passes through before its route: an id (in ``X-Request-Id`` and every
error envelope), its route's body limit (``BodyLimits``: a JSON body past it is refused
before it is read whole), ``GET /healthz`` (``answer_alive``) and the hot requests' lanes
(``lanes``), answered here in plain ASGI ahead of FastAPI's routing. ``create_app`` wraps
the app in ``RequestContext``."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from tracestore import schemas
from tracestore.errors import PayloadTooLarge
from tracestore.metadata import MAX_METADATA_BYTES
from tracestore.schemas.filenames import MAX_NAME_BYTES
from tracestore.server import presigned
from tracestore.server.ids import new_request_id
from tracestore.server.serving.lanes import Lane, Lanes
from tracestore.server.settings import Settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


LIVENESS_PATH = "/healthz"
ALIVE = schemas.Health(status="ok").model_dump_json(by_alias=True).encode()


async def answer_alive(send: Send) -> None:
    """The liveness answer in plain ASGI, sent for every ``GET /healthz`` ahead of the
    framework's middleware and routing (routes/health.py describes it): a probe that load
    balancers poll should cost what the server stack costs, not what a route does."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ALIVE))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ALIVE})


def error_response(
    request_id: str,
    status: int,
    code: str,
    message: str,
    extra_headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    headers = {**(extra_headers or {}), "X-Request-Id": request_id}
    if status >= 500:
        # uvicorn drops the connection after an unexpected error (and a request's body may
        # be unread): say so, or the client's next request on it is reset.
        headers["Connection"] = "close"
    # A message may quote a value the client sent: a lone surrogate in it is written as its
    # escape, or the answer could not be encoded (a 500 in place of the error).
    message = message.encode("utf-8", "backslashreplace").decode()
    return JSONResponse(
        {"error": {"code": code, "message": message, "requestId": request_id}},
        status_code=status,
        headers=headers,
    )


def request_id_of(request: Request) -> str:
    return str(getattr(request.state, "request_id", None) or new_request_id())


# JSON may write each byte of a text as ``\u00XX``; and a body may be pretty-printed.
_ESCAPED = 6
# Any body but upload-url's and completion's: every member of a request written out in full
# (promote's workloadMetadata pretty-printed, its description and tags escaped).
SMALL_BODY = 16 * MAX_METADATA_BYTES
# One file of upload-url at most: its name and content type escaped, the rest and whitespace.
UPLOAD_FILE_BODY = _ESCAPED * (MAX_NAME_BYTES + 255) + 512


@dataclass(frozen=True)
class BodyLimits:
    """The largest JSON body each route takes (413 above it), from the rules of its members:
    upload-url's grows with ``TRACESTORE_MAX_FILES_PER_UPLOAD``, completion's with the parts
    an upload may have, the census before upload's with the files' first bytes; the others
    are small. None passes ``TRACESTORE_MAX_JSON_BODY``.
    The two routes' paths are their routes' own (``create_app`` hands them over)."""

    upload_url: int
    complete: int
    other: int
    upload_url_path: str = ""
    complete_path: str = ""
    census_path: str = ""  # the census before upload: files' first bytes, up to the most

    @classmethod
    def of(
        cls,
        settings: Settings,
        *,
        upload_url_path: str = "",
        complete_path: str = "",
        census_path: str = "",
    ) -> BodyLimits:
        most = settings.max_json_body
        files = SMALL_BODY + settings.max_files_per_upload * UPLOAD_FILE_BODY
        return cls(
            upload_url=min(most, files),
            complete=most,
            other=min(most, SMALL_BODY),
            upload_url_path=upload_url_path,
            complete_path=complete_path,
            census_path=census_path,
        )

    def of_request(self, scope: Scope) -> int:
        path = scope.get("path")
        if path in (self.upload_url_path, self.upload_url_path + "/check"):
            return self.upload_url
        return self.complete if path in (self.complete_path, self.census_path) else self.other


class RequestContext:
    """Gives every request an id, and refuses JSON bodies over their route's limit
    (``BodyLimits``) before reading them whole (part uploads to the embedded store are
    exempt: their size is checked per part). Answers ``GET /healthz`` and the hot requests'
    lanes (``lanes.lane_of``) itself."""

    def __init__(self, app: ASGIApp, limits: BodyLimits, lanes: Lanes) -> None:
        self.app = app
        self.limits = limits
        self.lanes = lanes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"x-request-id" for k, _ in headers):
                    headers.append((b"x-request-id", request_id.encode()))
                message["headers"] = headers
            await send(message)

        path = str(scope.get("path", ""))
        if path == LIVENESS_PATH and scope.get("method") == "GET":
            await answer_alive(send_with_id)
            return
        if path.startswith(presigned.PREFIX + "/"):
            part = self.lanes.lane_of(scope, receive)
            if part is not None:
                await _answer_lane(part, scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
            return
        limit = self.limits.of_request(scope)
        for key, value in scope.get("headers", []):
            if key == b"content-length" and value.isdigit() and int(value) > limit:
                response = error_response(request_id, 413, PayloadTooLarge.code, too_large(limit))
                await response(scope, receive, send)
                return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLarge(too_large(limit))
            return message

        lane = self.lanes.lane_of(scope, limited_receive)
        if lane is not None:
            await _answer_lane(lane, scope, receive, send_with_id)
            return
        await self.app(scope, limited_receive, send_with_id)


async def _answer_lane(lane: Lane, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer as the lane's route would: its JSON (or its own response), or what the app's
    handler of its error answers (``handler_of``). An unexpected error goes on to
    Starlette's ServerErrorMiddleware, as a route's does: the app's handler answers and
    logs it, and the server logs it again."""
    try:
        answer = await lane(scope["app"].state.services)
    except Exception as exc:
        handler = handler_of(scope["app"], exc)
        if handler is None:
            raise
        response = handler(Request(scope, receive), exc)
        if inspect.isawaitable(response):
            response = await response
        await response(scope, receive, send)
        return
    if isinstance(answer, str):
        answer = Response(answer, media_type="application/json")
    await answer(scope, receive, send)


def handler_of(app: Any, exc: Exception) -> Callable[..., Any] | None:
    """The handler the app's ExceptionMiddleware would call for ``exc``, found as Starlette
    finds it (an HTTPException's status first, then the nearest of its classes); None for
    what only ServerErrorMiddleware answers (the handler of ``Exception``, the 500)."""
    handlers = {k: v for k, v in app.exception_handlers.items() if k not in (500, Exception)}
    if isinstance(exc, StarletteHTTPException) and exc.status_code in handlers:
        return handlers[exc.status_code]  # type: ignore[no-any-return]
    return next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)


def too_large(limit: int) -> str:
    return f"The request body is larger than the limit of {limit} bytes"
