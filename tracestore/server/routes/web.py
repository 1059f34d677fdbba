"""The web page: the HTML shell at each page URL (``/``, ``/tracesets/{id}``, ``/upload``,
the login's callback); its modules are under ``/static`` (mounted in app.py). The page's
router (static/app.js) picks the view from the URL, so a view's URL can be shared and
reloaded. Each answers HEAD as it answers GET (probes and link checkers ask HEAD). Any other
path, the API's included, keeps the JSON 404 of the one error handler, and so does the
login's callback when no login is configured."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from starlette.exceptions import HTTPException

from tracestore.server.deps import ServicesDep
from tracestore.server.web import LOGIN_CALLBACK, login_config, page_headers, shell_html

router = APIRouter(include_in_schema=False)
PAGE_METHODS = ["GET", "HEAD"]


def _shell(services: ServicesDep) -> HTMLResponse:
    settings = services.settings
    return HTMLResponse(shell_html(settings), headers=page_headers(settings))


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


@router.api_route(LOGIN_CALLBACK, methods=PAGE_METHODS, response_class=HTMLResponse)
def login_callback_page(services: ServicesDep) -> HTMLResponse:
    """Where the deployment's OIDC login sends the browser back with its code (a 404 like
    any unknown path when no login is configured)."""
    if login_config(services.settings) is None:
        raise HTTPException(404)
    return _shell(services)
