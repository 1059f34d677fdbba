"""Where the token goes: only this tab's sessionStorage and the Authorization header of the
page's own API calls; never a URL, a Referer, a cookie, localStorage or the service's log."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, Request, expect

from tests.support.seeding import chakra_ranks, sign_in, upload
from tests.support.served import Served
from tests.support.waiting import wait_until


def test_the_token_stays_in_session_storage_and_the_authorization_header(
    served: Served, page: Page, tmp_path: Path
) -> None:
    upload(served, "kept", chakra_ranks(0), '{"shape":{"rankCount":1}}')
    sent: list[Request] = []
    page.on("request", lambda request: sent.append(request))
    sign_in(page, served)
    page.get_by_role("link", name="kept").click()
    page.get_by_role("button", name="Validate").click()
    expect(page.locator(".validation [data-valid]")).to_have_text("Valid.")
    with page.expect_download():
        page.get_by_role("button", name="Download all_reduce.0.et").click()
    page.get_by_role("link", name="Tracesets", exact=True).click()
    expect(page.get_by_role("link", name="kept")).to_be_visible()

    token = served.token
    assert page.evaluate("sessionStorage.getItem('tracestore.token')") == token
    assert page.evaluate("document.cookie") == ""
    assert page.evaluate("localStorage.length") == 0
    assert page.context.cookies() == []
    for request in sent:
        headers = request.all_headers()
        assert token not in request.url, request.url
        assert "referer" not in headers, (request.url, headers.get("referer"))
        authorization = headers.get("authorization")
        if authorization is not None:
            assert request.url.startswith(served.url + "/api/v1/"), request.url
    assert any(r.headers.get("authorization") == f"Bearer {token}" for r in sent)
    # The access log is written as each answer goes. The log prints the admin token once,
    # when the store is created; no request logs it.
    requests_logged = wait_until(
        lambda: "/api/v1/tracesets" in (text := logged_requests(tmp_path)) and text,
        "no request to /api/v1/tracesets logged",
        10,
    )
    assert token not in requests_logged
    page.get_by_role("button", name="Sign out").click()
    assert page.evaluate("sessionStorage.length") == 0


def test_a_pasted_token_with_a_character_no_token_has_is_refused_at_once(
    served: Served, page: Page
) -> None:
    # The docs' placeholder "tst_…" pasted as is, or a token broken over two lines: a header
    # cannot carry either, and fetch refuses it before anything is sent.
    asked: list[str] = []  # "at once": without asking the service anything
    page.on("request", lambda request: asked.append(request.url))
    for pasted in ["tst_…", "tst_abc\ndef"]:
        page.goto(served.url + "/")
        page.wait_for_load_state("networkidle")
        page.get_by_label("API token").fill(pasted)
        asked.clear()
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_contain_text("A token is one word of printable ASCII")
        assert not [url for url in asked if "/api/" in url], asked
        assert page.evaluate("sessionStorage.getItem('tracestore.token')") is None


def logged_requests(tmp_path: Path) -> str:
    """What the server logged since it started."""
    log = (tmp_path / "server.log").read_text()
    return log.split("Application startup complete", 1)[1]
