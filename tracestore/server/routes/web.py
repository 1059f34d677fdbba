"""The web page: the HTML shell at ``/``; its modules are under ``/static`` (mounted in app.py)."""

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


@router.get("/", response_class=HTMLResponse)
def page() -> HTMLResponse:
    """The page's shell; the views render in the browser from the JSON API."""
    return HTMLResponse((STATIC_DIR / "index.html").read_text(), headers=PAGE_HEADERS)
