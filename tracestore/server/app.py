"""create_app(settings): the routes, the one error envelope, and the service's lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

from anyio import to_thread
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match, Mount

from tracestore import __version__, schemas
from tracestore.errors import (
    ERRORS_BY_STATUS,
    NO_ROUTE,
    InternalError,
    TracestoreError,
)
from tracestore.server.auth import bootstrap
from tracestore.server.db.database import POOL_SIZE
from tracestore.server.request_bodies import pydantic_message
from tracestore.server.routes import (
    analysis,
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
from tracestore.server.serving import lanes
from tracestore.server.serving.connection_log import CONNECTIONS
from tracestore.server.serving.lanes import Lanes
from tracestore.server.serving.process_tuning import freeze_startup_heap, keep_heap_warm
from tracestore.server.serving.request_context import (
    BodyLimits,
    RequestContext,
    error_response,
    request_id_of,
)
from tracestore.server.settings import Settings
from tracestore.server.web import STATIC_DIR, STATIC_URL, StaticModules
from tracestore.server.worker import Worker

log = logging.getLogger("tracestore")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(TracestoreError)
    async def domain_error(request: Request, exc: TracestoreError) -> JSONResponse:
        return error_response(request_id_of(request), exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def request_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(
            request_id_of(request), 400, "VALIDATION_ERROR", pydantic_message(exc.errors())
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        cls = ERRORS_BY_STATUS.get(exc.status_code, InternalError)
        if exc.status_code == 404:
            message = f"{NO_ROUTE} {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        status = exc.status_code if exc.status_code in ERRORS_BY_STATUS else 500
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # RFC 9110: name the methods the path allows
            headers["Allow"] = _allowed_methods(request) or headers.get("Allow", "")
        return error_response(request_id_of(request), status, cls.code, message, headers)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        # A client that goes away mid-body (a dropped part PUT): nobody reads the answer.
        return await domain_error(request, lanes.client_gone(request_id_of(request)))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        request_id = request_id_of(request)
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
                    schemas.UploadCensusRequest,
                    schemas.UploadWorkloadMetadata,
                    schemas.WorkloadMetadata,
                    schemas.PromoteRequest,
                    schemas.EditRequest,
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


def _route_of(routers: Sequence[APIRouter], endpoint: Callable[..., Any]) -> APIRoute:
    """The one route of ``routers`` (those the app includes as they are) that ``endpoint``
    answers."""
    (route,) = (
        r
        for router in routers
        for r in router.routes
        if isinstance(r, APIRoute) and r.endpoint is endpoint
    )
    return route


def _lanes(routers: Sequence[APIRouter], *, part_lane: bool) -> Lanes:
    """Each laned route's taker on that route's own method and path (``serving.lanes``):
    declared once, here, by the route's handler."""
    takers: dict[Callable[..., Any], lanes.Taker] = {
        listing.list_tracesets: lanes.tracesets_page,
        tracesets.get_traceset: lanes.traceset,
        uploads.request_upload_urls: lanes.upload_url,
    }
    if part_lane:  # as local_store_router is mounted
        takers[blobs.put_part] = lanes.part
    laned = []
    for endpoint, taker in takers.items():
        route = _route_of(routers, endpoint)
        (method,) = cast(set[str], route.methods)
        laned.append((method, route.path, taker))
    return Lanes(laned)


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
            CONNECTIONS.flush()  # what the shutdown's grace counted, said before exit
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
    routers = [
        r.router
        for r in (listing, uploads, tracesets, analysis, promotion, downloads, libraries, blobs)
    ]
    if stores_bytes_locally(settings):  # an object store answers its own part and blob URLs
        routers.append(blobs.local_store_router)
    routers += [health.router, web.router]
    for router in routers:
        app.include_router(router)
    app.mount(STATIC_URL, StaticModules(directory=STATIC_DIR), name="static")
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    limits = BodyLimits.of(
        settings,
        upload_url_path=_route_of(routers, uploads.request_upload_urls).path,
        complete_path=_route_of(routers, uploads.complete_upload).path,
        census_path=_route_of(routers, uploads.census_before_upload).path,
    )
    local = stores_bytes_locally(settings)
    laned = _lanes(routers, part_lane=local) if with_lanes else Lanes(())
    app.state.lanes = laned
    app.add_middleware(RequestContext, limits=limits, lanes=laned)
    return app
