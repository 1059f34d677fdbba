"""The web page: the HTML shell at each page URL (``/``, ``/tracesets/{id}``, ``/upload``,
``/compare``, the login's callback); its modules are under ``/static`` (mounted in app.py).
The page's router (static/app.js) picks the view from the URL, so a view's URL can be shared
and reloaded. Each answers HEAD as it answers GET (probes and link checkers ask HEAD). Any other
path, the API's included, keeps the JSON 404 of the one error handler, and so does the
login's callback when no login is configured."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from starlette.exceptions import HTTPException

from tracestore.server.deps import ServicesDep
from tracestore.server.web import (
    LOGIN_CALLBACK,
    docs_headers,
    login_config,
    page_headers,
    shell_html,
)

router = APIRouter(include_in_schema=False)
PAGE_METHODS = ["GET", "HEAD"]


def _shell(services: ServicesDep) -> HTMLResponse:
    settings = services.settings
    return HTMLResponse(shell_html(settings), headers=page_headers(settings, services.part_origin))


@router.api_route("/", methods=PAGE_METHODS, response_class=HTMLResponse)
def page(services: ServicesDep) -> HTMLResponse:
    """The list of tracesets (its filters in the query string); the views render in the
    browser from the JSON API."""
    return _shell(services)


@router.api_route("/tracesets/{traceset_id}", methods=PAGE_METHODS, response_class=HTMLResponse)
def traceset_page(traceset_id: str, services: ServicesDep) -> HTMLResponse:
    """One traceset's detail view (the page asks the API for it, and says so if it is not
    there)."""
    return _shell(services)


@router.api_route("/upload", methods=PAGE_METHODS, response_class=HTMLResponse)
def upload_page(services: ServicesDep) -> HTMLResponse:
    """The upload view."""
    return _shell(services)


@router.api_route("/compare", methods=PAGE_METHODS, response_class=HTMLResponse)
def compare_page(services: ServicesDep) -> HTMLResponse:
    """The comparison of two tracesets (``?base=&other=``; the page asks the API)."""
    return _shell(services)


@router.api_route(LOGIN_CALLBACK, methods=PAGE_METHODS, response_class=HTMLResponse)
def login_callback_page(services: ServicesDep) -> HTMLResponse:
    """Where the deployment's OIDC login sends the browser back with its code (a 404 like
    any unknown path when no login is configured)."""
    if login_config(services.settings) is None:
        raise HTTPException(404)
    return _shell(services)


# The API's documentation, from files in the installed package (an air-gapped cluster has no
# CDN; fastapi_offline mounts them at DOCS_ASSETS), under a policy of its own.
DOCS_ASSETS = "/docs-assets"
DOCS_URL = "/docs"
REDOC_URL = "/redoc"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"


def _documented(page: HTMLResponse, *, inline_styles: bool = False) -> HTMLResponse:
    text = bytes(page.body).decode()
    return HTMLResponse(text, headers=docs_headers(text, inline_styles=inline_styles))


def _urls(request: Request) -> tuple[FastAPI, str, str]:
    """The app, its description's URL and its viewers' files' URL, under the root path."""
    app: FastAPI = request.app
    root = request.scope.get("root_path", "")
    return app, f"{root}{app.openapi_url}", f"{root}{DOCS_ASSETS}"


@router.get(DOCS_URL, response_class=HTMLResponse)
def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI on the OpenAPI description."""
    app, description, assets = _urls(request)
    page = get_swagger_ui_html(
        openapi_url=description,
        title=f"{app.title} - Swagger UI",
        oauth2_redirect_url=request.scope.get("root_path", "") + OAUTH2_REDIRECT,
        swagger_js_url=f"{assets}/swagger-ui-bundle.js",
        swagger_css_url=f"{assets}/swagger-ui.css",
        swagger_favicon_url=f"{assets}/favicon.png",
        swagger_ui_parameters=app.swagger_ui_parameters,
    )
    return _documented(page)


@router.get(OAUTH2_REDIRECT, response_class=HTMLResponse)
def swagger_ui_redirect() -> HTMLResponse:
    """Where Swagger UI's OAuth2 login returns."""
    return _documented(get_swagger_ui_oauth2_redirect_html())


@router.get(REDOC_URL, response_class=HTMLResponse)
def redoc(request: Request) -> HTMLResponse:
    """ReDoc on the OpenAPI description."""
    app, description, assets = _urls(request)
    page = get_redoc_html(
        openapi_url=description,
        title=f"{app.title} - ReDoc",
        redoc_js_url=f"{assets}/redoc.standalone.js",
        redoc_favicon_url=f"{assets}/favicon.png",
        with_google_fonts=False,
    )
    return _documented(page, inline_styles=True)
