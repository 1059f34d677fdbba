"""The web page: the HTML shell at each page URL (``/``, ``/tracesets/{id}``, ``/upload``);
its modules are under ``/static`` (mounted in app.py). The page's router (static/app.js) picks
the view from the URL, so a view's URL can be shared and reloaded. Any other path, the API's
included, keeps the JSON 404 of the one error handler."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from tracestore.server.web import STATIC_DIR

router = APIRouter(include_in_schema=False)

# The page runs only its own scripts, talks only to its own origin (presigned URLs of the
# embedded store are same-origin; an S3 deployment adds its endpoint, see docs/web.md), and may
# not be framed by another site.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _shell() -> HTMLResponse:
    return HTMLResponse((STATIC_DIR / "index.html").read_text(), headers=PAGE_HEADERS)


@router.get("/", response_class=HTMLResponse)
def page() -> HTMLResponse:
    """The list of tracesets (its filters in the query string); the views render in the
    browser from the JSON API."""
    return _shell()


@router.get("/tracesets/{traceset_id}", response_class=HTMLResponse)
def traceset_page(traceset_id: str) -> HTMLResponse:
    """One traceset's detail view (the page asks the API for it, and says so if it is not
    there)."""
    return _shell()


@router.get("/upload", response_class=HTMLResponse)
def upload_page() -> HTMLResponse:
    """The upload view."""
    return _shell()
