"""The web page's files: one HTML shell and the ES modules and stylesheet it loads.

They are served by the service itself (the page URLs and ``/static``), never from a CDN: an
air-gapped cluster has none. There is no build step; the files here are what the browser runs.
The shell is the one file the service fills in: the login the deployment configures (a
``<meta>`` the page reads, since it runs no inline script) and the origins its Content
Security Policy lets the page reach besides its own.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from tracestore.choices import CENSUS_VERDICTS, SCOPES, STATUSES
from tracestore.server.settings import Settings

STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_URL = "/static"
LOGIN_CALLBACK = "/signin/callback"  # where the deployment's login sends the browser back
_CONFIG_MARK = "<!-- page config -->"


def login_config(settings: Settings) -> dict[str, str] | None:
    """What the page needs for the OIDC authorization-code login with PKCE, if configured."""
    if not settings.oidc_client_id:
        return None
    return {
        "authorizationUrl": str(settings.oidc_authorization_url),
        "tokenUrl": str(settings.oidc_token_url),
        "clientId": settings.oidc_client_id,
        "scope": settings.oidc_scope,
        "callbackPath": LOGIN_CALLBACK,
    }


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def connect_origins(settings: Settings, part_origin: str | None) -> list[str]:
    """The origins besides its own the page may send requests to: those of
    TRACESTORE_WEB_CONNECT_ORIGINS when set, else the origin of the blob store's part URLs
    when they are not the service's (an S3 bucket's, ``part_origin``: the page PUTs parts
    there); and the login's token endpoint."""
    chosen = settings.web_connect_origins
    connect = list(chosen) if chosen is not None else [part_origin] if part_origin else []
    if settings.oidc_token_url and settings.oidc_client_id:
        connect.append(_origin(settings.oidc_token_url))
    return list(dict.fromkeys(connect))


def blocked_part_origin(settings: Settings, part_origin: str | None) -> str | None:
    """The warning ``serve`` starts with when the page may not reach where parts go (an S3
    origin TRACESTORE_WEB_CONNECT_ORIGINS leaves out): browser uploads would stall."""
    if part_origin is None or part_origin in connect_origins(settings, part_origin):
        return None
    chosen = ",".join([*(settings.web_connect_origins or []), part_origin])
    return (
        f"Warning: the web page may not send parts to the bucket at {part_origin} "
        "(its Content-Security-Policy), so uploads from the browser stall: set "
        f"TRACESTORE_WEB_CONNECT_ORIGINS={chosen}, or unset it (the bucket's origin is the "
        "default); the bucket's CORS must also allow PUT from the page's origin and expose "
        "ETag (docs/deploy.md)"
    )


def page_headers(settings: Settings, part_origin: str | None) -> dict[str, str]:
    """The page's headers: it runs only its own scripts, talks only to its own origin plus
    :func:`connect_origins` (the bucket its uploads go to, the login's token endpoint) and
    may not be framed by another site."""
    connect = ["'self'", *connect_origins(settings, part_origin)]
    return {
        "Content-Security-Policy": (
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            f"connect-src {' '.join(connect)}; frame-ancestors 'none'; "
            "base-uri 'none'; form-action 'self'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }


_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def docs_headers(page: str, *, inline_styles: bool = False) -> dict[str, str]:
    """The headers of ``/docs`` (Swagger UI) and ``/redoc``: the page's policy, their own
    inline scripts allowed by hash (the ones in ``page``, written for this request's root
    path), and inline styles where the viewer writes its own (ReDoc's styled components;
    its search runs in a worker made from a ``blob:``). Never framed by another site."""
    scripts = ["'self'"] + [
        "'sha256-" + base64.b64encode(hashlib.sha256(code.encode()).digest()).decode() + "'"
        for code in _INLINE_SCRIPT.findall(page)
    ]
    styles = "'self' 'unsafe-inline'" if inline_styles else "'self'"
    workers = "; worker-src 'self' blob:" if inline_styles else ""
    return {
        "Content-Security-Policy": (
            f"default-src 'self'; script-src {' '.join(scripts)}; "
            f"style-src {styles}; img-src 'self' data:; connect-src 'self'{workers}; "
            "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }


def shell_html(settings: Settings) -> str:
    """index.html with the deployment's login, if any, in a ``<meta>`` for app.js, and the
    traceset statuses, scopes and census verdicts (``tracestore.choices``) for the list's
    filters."""
    text = (STATIC_DIR / "index.html").read_text()
    config = login_config(settings)
    meta = _meta("tracestore-statuses", list(STATUSES)) + _meta("tracestore-scopes", list(SCOPES))
    meta += _meta("tracestore-census", list(CENSUS_VERDICTS))
    if config is not None:
        meta += _meta("tracestore-login", config)
    return text.replace(_CONFIG_MARK, meta)


def _meta(name: str, value: object) -> str:
    return f'<meta name="{name}" content="{html.escape(json.dumps(value))}">'


# The modules' URLs carry no version, so a browser revalidates each one (a 304 while it is
# unchanged) instead of running last release's app.js beside this release's api.js; and it
# takes each file as the type it is sent with, never as one it guesses.
STATIC_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


class StaticModules(StaticFiles):
    """``/static``: the page's files, with :data:`STATIC_HEADERS` on every answer."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        """The file (or its 304) at ``path``, with the headers above."""
        response = await super().get_response(path, scope)
        response.headers.update(STATIC_HEADERS)
        return response
