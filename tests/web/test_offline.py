"""The page works on an air-gapped cluster: every request it makes, through sign-in, the list,
a traceset's detail, validate and a download, goes to the service's own origin, and the
strict CSP is never violated (no inline script or style, no eval)."""

from __future__ import annotations

from playwright.sync_api import ConsoleMessage, Page, Request, expect

from tests.support.paths import SCREENSHOTS
from tests.support.seeding import chakra_ranks, upload
from tests.support.served import Served


def test_the_page_loads_and_works_with_no_request_leaving_the_machine(
    served: Served, page: Page
) -> None:
    upload(served, "local", chakra_ranks(0, 1), '{"workload_family":"llm","shape":{"rankCount":2}}')
    requests: list[str] = []
    failed: list[str] = []
    console: list[str] = []

    def failed_request(request: Request) -> None:
        failed.append(f"{request.url} {request.failure}")

    def logged(message: ConsoleMessage) -> None:
        console.append(f"{message.type}: {message.text}")

    page.on("request", lambda request: requests.append(request.url))
    page.on("requestfailed", failed_request)
    page.on("console", logged)
    page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))

    page.goto(served.url + "/")
    expect(page.get_by_label("API token")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "signin.png"))
    page.get_by_label("API token").fill(served.token)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="local").click()
    expect(page.locator(".census-grid .cell")).to_have_count(2)
    page.get_by_role("button", name="Validate").click()
    expect(page.locator(".validation [data-valid]")).to_have_text("Valid.")
    with page.expect_download():
        page.get_by_role("button", name="Download all_reduce.0.et").click()
    page.get_by_role("link", name="Tracesets", exact=True).click()
    expect(page.get_by_role("link", name="local")).to_be_visible()

    assert requests, "the page made no request at all"
    elsewhere = [url for url in requests if not url.startswith(served.url + "/")]
    assert elsewhere == []
    assert any("/static/app.js" in url for url in requests)
    assert any("/api/v1/tracesets" in url for url in requests)
    assert failed == [], failed
    assert console == [], console
