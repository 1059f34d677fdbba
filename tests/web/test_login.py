"""Sign-in through the deployment's OIDC login (authorization code with PKCE) against a
small identity provider of the test's own; the JWT it gives is what the page then sends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.oidc_provider import Provider, identity_provider
from tests.support.seeding import chakra_ranks, upload
from tests.support.served import Served, serving


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[Provider]:
    with identity_provider(
        tmp_path, sub="ada@login", tenant="default", workspaces=["default"]
    ) as running:
        yield running


@pytest.fixture
def with_login(tmp_path: Path, provider: Provider) -> Iterator[Served]:
    with serving(tmp_path / "data", env=provider.service_env()) as service:
        yield service


def test_sign_in_through_the_login_and_land_on_the_view_it_began_on(
    with_login: Served, provider: Provider, page: Page
) -> None:
    upload(
        with_login, "shared", chakra_ranks(0), '{"workload_family":"llm","shape":{"rankCount":1}}'
    )
    shell = httpx.get(with_login.url + "/")
    assert f"connect-src 'self' {provider.url};" in shell.headers["content-security-policy"]

    page.goto(with_login.url + "/?workload_family=llm")
    page.get_by_role("button", name="Sign in with your organisation's login").click()
    expect(page.get_by_role("link", name="shared")).to_be_visible()
    assert page.url == with_login.url + "/?workload_family=llm"  # no code left in the URL
    stored = page.evaluate("sessionStorage.getItem('tracestore.token')")
    assert stored.count(".") == 2  # the login's JWT, not an API token
    assert page.evaluate("sessionStorage.getItem('tracestore.login')") is None
    (exchange,) = provider.exchanges
    assert exchange["redirect_uri"] == with_login.url + "/signin/callback"
    assert len(exchange["code_verifier"]) >= 43  # RFC 7636's minimum
    # The JWT is the page's credential from now on: the service knows ada by it.
    answer = httpx.get(
        with_login.url + "/api/v1/tracesets", headers={"Authorization": f"Bearer {stored}"}
    )
    assert [item["name"] for item in answer.json()["items"]] == ["shared"]


def test_a_refused_login_says_why_and_the_token_form_still_works(
    with_login: Served, provider: Provider, page: Page
) -> None:
    provider.refuse = "access_denied"
    page.goto(with_login.url + "/")
    page.get_by_role("button", name="Sign in with your organisation's login").click()
    expect(page.get_by_role("alert")).to_have_text(
        "The login refused the sign-in: access_denied (The user said no)."
    )
    assert "code" not in page.url and "error" not in page.url
    page.get_by_label("API token").fill(with_login.token)
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def test_a_callback_this_tab_did_not_start_is_refused(with_login: Served, page: Page) -> None:
    page.goto(with_login.url + "/signin/callback?code=stolen&state=guessed")
    expect(page.get_by_role("alert")).to_have_text(
        "This answer from the login does not belong to a sign-in started in this tab. "
        "Sign in again."
    )
    assert page.evaluate("sessionStorage.getItem('tracestore.token')") is None


def test_without_a_configured_login_the_page_offers_tokens_only(served: Served, page: Page) -> None:
    assert "tracestore-login" not in httpx.get(served.url + "/").text
    page.goto(served.url + "/")
    expect(page.get_by_label("API token")).to_be_visible()
    expect(page.get_by_role("button", name="Sign in with your organisation's login")).to_have_count(
        0
    )


def test_an_error_answer_this_tab_did_not_ask_for_cannot_put_words_in_the_page(
    with_login: Served, page: Page
) -> None:
    # A link anyone can send: without this tab's state it is not the login speaking.
    page.goto(
        with_login.url + "/signin/callback?error=access_denied"
        "&error_description=Your+account+is+locked.+Call+555-0100&state=guessed"
    )
    expect(page.get_by_role("alert")).to_have_text(
        "This answer from the login does not belong to a sign-in started in this tab. "
        "Sign in again."
    )
    assert "555" not in page.locator("main").inner_text()
    assert "error" not in page.url


def test_a_callback_is_single_use(with_login: Served, provider: Provider, page: Page) -> None:
    callbacks: list[str] = []
    page.on(
        "request",
        lambda request: (
            callbacks.append(request.url) if "/signin/callback" in request.url else None
        ),
    )
    page.goto(with_login.url + "/upload")
    page.get_by_role("button", name="Sign in with your organisation's login").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    assert page.url == with_login.url + "/upload"
    (callback,) = callbacks
    assert "code=" in callback and "state=" in callback
    # The same answer again (a replayed or shared callback URL) is refused: its state was
    # this tab's once, and the verifier is gone.
    page.get_by_role("button", name="Sign out").click()
    page.goto(callback)
    expect(page.get_by_role("alert")).to_have_text(
        "This answer from the login does not belong to a sign-in started in this tab. "
        "Sign in again."
    )
    assert len(provider.exchanges) == 1
    assert page.evaluate("sessionStorage.getItem('tracestore.token')") is None


def test_a_code_exchange_cut_off_after_it_was_sent_is_not_sent_again(
    with_login: Served, provider: Provider, page: Page
) -> None:
    """The code is single-use: sent again, the exchange would be refused, and the page would
    say the login refused it (issue 42, item 5)."""
    provider.cut = True
    page.goto(with_login.url + "/")
    page.get_by_role("button", name="Sign in with your organisation's login").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("The login's token endpoint did not answer")
    expect(alert).to_contain_text("Sign in again.")
    assert len(provider.exchanges) == 1
    assert page.evaluate("sessionStorage.getItem('tracestore.token')") is None
