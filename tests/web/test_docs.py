"""The API's documentation pages, /docs (Swagger UI) and /redoc, under a Content Security
Policy of their own: each renders the OpenAPI description in Chromium with no violation of
it, and neither may be framed by another site (issue 41: they had no policy at all)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.served import Served

LISTEN = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) =>
  window.__violations.push(event.violatedDirective + " " + event.blockedURI));
"""

REDOCLY_LOGO = "img-src https://cdn.redoc.ly/redoc/logo-mini.svg"
# What each viewer shows once it has read the description: an operation of it.
RENDERED = {
    "/docs": "#swagger-ui .opblock-summary-path[data-path='/api/v1/tracesets/upload-url']",
    "/redoc": "redoc [role=menuitem]:has-text('Upload Urls')",
}


@pytest.mark.parametrize("path", sorted(RENDERED))
def test_the_api_documentation_renders_under_its_policy(
    served: Served, page: Page, path: str
) -> None:
    policy = httpx.get(served.url + path).headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy
    assert "default-src 'self'" in policy
    assert "'unsafe-eval'" not in policy
    if path == "/docs":  # its one inline script by hash, never any inline script
        assert "'unsafe-inline'" not in policy
    errors: list[str] = []
    console: list[str] = []
    page.add_init_script(LISTEN)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: console.append(message.text))
    page.goto(served.url + path)
    expect(page.locator(RENDERED[path]).first).to_be_visible(timeout=30_000)
    # ReDoc's footer links Redocly's logo from its CDN: the one thing the policy keeps out.
    violations = [v for v in page.evaluate("window.__violations") if v != REDOCLY_LOGO]
    assert violations == []
    assert errors == []
    refused = [text for text in console if "Content Security Policy" in text]
    assert all("cdn.redoc.ly" in text for text in refused), refused
