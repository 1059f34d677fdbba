"""create_app(settings): the routes, the one error envelope, and the service's lifespan."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match, Mount

from tracestore import __version__, schemas
from tracestore.errors import (
    ERRORS_BY_STATUS,
    InternalError,
    PayloadTooLarge,
    TracestoreError,
)
from tracestore.metadata import MAX_METADATA_BYTES
from tracestore.schemas.filenames import MAX_NAME_BYTES
from tracestore.server import lanes, presigned
from tracestore.server.auth import bootstrap
from tracestore.server.database import POOL_SIZE
from tracestore.server.heap import freeze_startup_heap, keep_heap_warm
from tracestore.server.routes import (
    blobs,
    downloads,
    health,
    libraries,
    listing,
    promotion,
    tracesets,
    uploads,
    web,
)
from tracestore.server.services import Services, build_services, stores_bytes_locally
from tracestore.server.settings import Settings
from tracestore.server.validation import pydantic_message
from tracestore.server.web import STATIC_DIR, STATIC_URL, StaticModules
from tracestore.server.worker import Worker

log = logging.getLogger("tracestore")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# Request ids need to be unique, not unguessable: drawn from a PRNG seeded from the OS (a
# token_hex per request was a getrandom(2) call each), reseeded in a forked child.
_request_ids = random.Random()
os.register_at_fork(after_in_child=_request_ids.seed)


def new_request_id() -> str:
    return f"req_{_request_ids.getrandbits(96):024x}"


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


def _request_id(request: Request) -> str:
    return str(getattr(request.state, "request_id", None) or new_request_id())


# JSON may write each byte of a text as ``\u00XX``; and a body may be pretty-printed.
_ESCAPED = 6
# Any body but upload-url's and completion's: every member of a request written out in full
# (promote's workloadMetadata pretty-printed, its description and tags escaped).
SMALL_BODY = 16 * MAX_METADATA_BYTES
# One file of upload-url at most: its name and content type escaped, the rest and whitespace.
UPLOAD_FILE_BODY = _ESCAPED * (MAX_NAME_BYTES + 255) + 512
COMPLETE_PATH = lanes.UPLOAD_PATH + "/complete"  # routes/uploads.py


@dataclass(frozen=True)
class BodyLimits:
    """The largest JSON body each route takes (413 above it), from the rules of its members:
    upload-url's grows with ``TRACESTORE_MAX_FILES_PER_UPLOAD``, completion's with the parts
    an upload may have; the others are small. None passes ``TRACESTORE_MAX_JSON_BODY``."""

    upload_url: int
    complete: int
    other: int

    @classmethod
    def of(cls, settings: Settings) -> BodyLimits:
        most = settings.max_json_body
        files = SMALL_BODY + settings.max_files_per_upload * UPLOAD_FILE_BODY
        return cls(upload_url=min(most, files), complete=most, other=min(most, SMALL_BODY))

    def of_request(self, scope: Scope) -> int:
        path = scope.get("path")
        if path == lanes.UPLOAD_PATH:
            return self.upload_url
        return self.complete if path == COMPLETE_PATH else self.other


class RequestContext:
    """Gives every request an id, and refuses JSON bodies over their route's limit
    (``BodyLimits``) before reading them whole (part uploads to the embedded store are
    exempt: their size is checked per part). Answers ``GET /healthz`` and the hot requests'
    lanes (``lanes.lane_of``) itself."""

    def __init__(
        self, app: ASGIApp, limits: BodyLimits, lanes: bool = True, part_lane: bool = False
    ) -> None:
        self.app = app
        self.limits = limits
        self.lanes = lanes
        self.part_lane = lanes and part_lane

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
        if path == health.LIVENESS_PATH and scope.get("method") == "GET":
            await health.answer_alive(send_with_id)
            return
        if path.startswith(presigned.PREFIX + "/"):
            part = lanes.part_lane_of(scope, receive) if self.part_lane else None
            if part is not None:
                await _answer_lane(part, scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
            return
        limit = self.limits.of_request(scope)
        for key, value in scope.get("headers", []):
            if key == b"content-length" and value.isdigit() and int(value) > limit:
                response = error_response(request_id, 413, PayloadTooLarge.code, _too_large(limit))
                await response(scope, receive, send)
                return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLarge(_too_large(limit))
            return message

        lane = lanes.lane_of(scope, limited_receive) if self.lanes else None
        if lane is not None:
            await _answer_lane(lane, scope, receive, send_with_id)
            return
        await self.app(scope, limited_receive, send_with_id)


async def _answer_lane(lane: lanes.Lane, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer as the lane's route would: its JSON (or its own response), or what the app's
    handler of its error answers (``_handler_of``). An unexpected error goes on to
    Starlette's ServerErrorMiddleware, as a route's does: the app's handler answers and
    logs it, and the server logs it again."""
    try:
        answer = await lane(scope["app"].state.services)
    except Exception as exc:
        handler = _handler_of(scope["app"], exc)
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


def _handler_of(app: Any, exc: Exception) -> Callable[..., Any] | None:
    """The handler the app's ExceptionMiddleware would call for ``exc``, found as Starlette
    finds it (an HTTPException's status first, then the nearest of its classes); None for
    what only ServerErrorMiddleware answers (the handler of ``Exception``, the 500)."""
    handlers = {k: v for k, v in app.exception_handlers.items() if k not in (500, Exception)}
    if isinstance(exc, StarletteHTTPException) and exc.status_code in handlers:
        return handlers[exc.status_code]  # type: ignore[no-any-return]
    return next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)


def _too_large(limit: int) -> str:
    return f"The request body is larger than the limit of {limit} bytes"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(TracestoreError)
    async def domain_error(request: Request, exc: TracestoreError) -> JSONResponse:
        return error_response(_request_id(request), exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def request_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(
            _request_id(request), 400, "VALIDATION_ERROR", pydantic_message(exc.errors())
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        cls = ERRORS_BY_STATUS.get(exc.status_code, InternalError)
        if exc.status_code == 404:
            message = f"No route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        status = exc.status_code if exc.status_code in ERRORS_BY_STATUS else 500
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # RFC 9110: name the methods the path allows
            headers["Allow"] = _allowed_methods(request) or headers.get("Allow", "")
        return error_response(_request_id(request), status, cls.code, message, headers)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        # A client that goes away mid-body (a dropped part PUT): nobody reads the answer.
        return await domain_error(request, lanes.client_gone(_request_id(request)))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        request_id = _request_id(request)
        log.exception("unexpected error in request %s", request_id)
        return error_response(
            request_id,
            500,
            InternalError.code,
            f"An unexpected error occurred; quote request id {request_id}",
        )


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> str:
    """Every method some route takes on the request's path (a mount's files answer their
    own 405); the router's own Allow names the first route matching the path only (GET of
    ``/api/v1/tracesets/{id}``, not its DELETE)."""
    routes = [route for route in request.app.routes if not isinstance(route, Mount)]
    allowed = [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
               for route in routes)
    ]  # fmt: skip
    return ", ".join(allowed)


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        document = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        _, extra = models_json_schema(
            [
                (m, "validation")
                for m in (
                    schemas.TracesetUploadUrlRequest,
                    schemas.UploadWorkloadMetadata,
                    schemas.WorkloadMetadata,
                    schemas.PromoteRequest,
                )
            ],
            ref_template="#/components/schemas/{model}",
        )
        components = document.setdefault("components", {}).setdefault("schemas", {})
        for name, schema in extra.get("$defs", {}).items():
            components.setdefault(name, schema)
        # Request validation answers 400 with the error envelope, never FastAPI's 422.
        for path in document.get("paths", {}).values():
            for operation in path.values():
                responses = operation.get("responses", {})
                # Keep a 422 a route documents itself (promotion's metadata checks).
                if responses.get("422", {}).get("description") == "Validation Error":
                    responses.pop("422")
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        app.openapi_schema = document
        return document

    return build


def _operation_id(route: APIRoute) -> str:
    return route.name


def create_app(
    settings: Settings | None = None, *, services: Services | None = None, with_lanes: bool = True
) -> FastAPI:
    """The tracestore ASGI application. Builds its services from ``settings`` at start
    unless ``services`` are handed in (tests do, to share them or inject a clock). Without
    ``with_lanes`` every request goes through FastAPI's routing (tests compare the two)."""
    if settings is None and services is not None:
        settings = services.settings
    elif settings is None:  # a worker process started by uvicorn's factory
        settings = Settings.load()
        for warning in settings.warnings:
            log.warning("%s", warning)
    owned = services is None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        keep_heap_warm()
        # The request threads and the database's pooled connections are the same number.
        to_thread.current_default_thread_limiter().total_tokens = POOL_SIZE
        if app.state.services is None:
            app.state.services = build_services(settings)
        services = app.state.services
        token_file = bootstrap(services.db, services.settings.data_dir, services.now())
        if token_file is not None:
            log.warning("created the admin user; its API token is in %s (mode 0600)", token_file)
        # One job worker per served app, unless it is an API-only replica; services shared
        # by several apps (tests) keep the first's.
        worker = None
        if services.worker is None:
            worker = Worker(services)
            services.worker = worker
            if services.settings.in_process_worker:
                worker.start()
        if owned:  # a served process (tests hand their services in, and keep their heap)
            freeze_startup_heap()
        try:
            yield
        finally:
            if worker is not None:
                await asyncio.to_thread(worker.stop)
                services.worker = None
            if owned and app.state.services is not None:
                app.state.services.close()

    # Swagger UI's and ReDoc's files from the installed package (an air-gapped cluster has no
    # CDN); /docs and /redoc are routes/web.py's, under a policy of their own.
    app = FastAPIOffline(
        docs_url=None,
        redoc_url=None,
        title="tracestore",
        version=__version__,
        description="A self-hostable traceset service: per-rank trace files of distributed "
        "training runs with their workload metadata.",
        lifespan=lifespan,
        static_url=web.DOCS_ASSETS,
        # Swagger UI would otherwise ask validator.swagger.io to check the document.
        swagger_ui_parameters={"validatorUrl": None},
        # operationIds are the handlers' names (list_tracesets): a generated client's methods.
        generate_unique_id_function=_operation_id,
    )
    app.state.services = services
    install_error_handlers(app)
    # Included in the order of the OpenAPI document's paths.
    for resource in (listing, uploads, tracesets, promotion, downloads, libraries, blobs):
        app.include_router(resource.router)
    if stores_bytes_locally(settings):  # an object store answers its own part and blob URLs
        app.include_router(blobs.local_store_router)
    app.include_router(health.router)
    app.include_router(web.router)
    app.mount(STATIC_URL, StaticModules(directory=STATIC_DIR), name="static")
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    app.add_middleware(
        RequestContext,
        limits=BodyLimits.of(settings),
        lanes=with_lanes,
        part_lane=stores_bytes_locally(settings),  # as local_store_router is mounted
    )
    return app
