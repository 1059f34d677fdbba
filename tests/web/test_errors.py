"""Errors as a person needs them: a 403 and a 404 say what happened and what to do, a token
the service stops accepting sends the page back to sign-in, and a service that does not
answer is retried while the page says it is waiting."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from playwright.sync_api import Page, Route, expect

from tests.support.envelopes import assert_error
from tests.support.seeding import admin, chakra_ranks, sign_in, upload
from tests.support.served import Served


def refuse_first(count: int, dropped: list[str]) -> Callable[[Route], None]:
    """A route handler: the first ``count`` requests find the connection refused (their URLs
    go to ``dropped``), the rest reach the service."""

    def handle(route: Route) -> None:
        if len(dropped) < count:
            dropped.append(route.request.url)
            route.abort("connectionrefused")
        else:
            route.continue_()

    return handle


def test_a_traceset_that_is_not_there_is_a_404_page_in_the_apis_words(
    served: Served, page: Page
) -> None:
    answer = httpx.get(
        f"{served.url}/api/v1/tracesets/ts_nothing",
        headers={"Authorization": f"Bearer {served.token}"},
    )
    message = assert_error(answer, 404, "NOT_FOUND")["message"]
    sign_in(page, served, path="/tracesets/ts_nothing")
    panel = page.locator('.problem[data-status="404"]')
    expect(panel.get_by_role("heading")).to_have_text("Not found")
    expect(panel.locator(".problem-message")).to_have_text(message)
    expect(panel.locator(".problem-next")).to_contain_text("It may have been deleted")
    panel.get_by_role("link", name="All tracesets").click()
    expect(page.get_by_role("heading", name="Tracesets")).to_be_visible()


def test_a_workspace_the_user_is_not_in_is_a_403_page_that_says_what_to_do(
    served: Served, page: Page, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    team = admin(data, "workspace", "create", "team")
    admin(data, "user", "create", "bob")
    bob = admin(data, "token", "create", "--user", "bob")["token"]
    sign_in(page, served, path=f"/?workspaceId={team['id']}", token=bob)
    panel = page.locator('.problem[data-status="403"]')
    expect(panel.get_by_role("heading")).to_have_text("Not allowed")
    refused = httpx.get(
        f"{served.url}/api/v1/tracesets",
        params={"workspaceId": team["id"]},
        headers={"Authorization": f"Bearer {bob}"},
    )
    expect(panel.locator(".problem-message")).to_have_text(
        assert_error(refused, 403, "FORBIDDEN")["message"]
    )
    expect(panel.locator(".problem-next")).to_contain_text("Ask a tenant admin")


def test_a_revoked_token_sends_the_page_back_to_sign_in(
    served: Served, page: Page, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    admin(data, "user", "create", "carol")
    issued = admin(data, "token", "create", "--user", "carol")
    sign_in(page, served, token=issued["token"])
    admin(data, "token", "revoke", issued["id"], json_output=False)
    page.get_by_role("link", name="Tracesets").click()
    expect(page.get_by_label("API token")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("The service no longer accepts your token")
    assert page.evaluate("sessionStorage.getItem('tracestore.token')") is None


def test_a_service_that_does_not_answer_is_retried_and_the_page_says_it_waits(
    served: Served, page: Page
) -> None:
    upload(served, "patient", chakra_ranks(0), '{"shape":{"rankCount":1}}', inspected=False)
    sign_in(page, served)
    dropped: list[str] = []
    page.route(lambda url: "/api/v1/tracesets" in url, refuse_first(4, dropped))
    page.get_by_role("link", name="Tracesets").click()
    expect(page.locator("#waiting")).to_contain_text("The service is not answering")
    expect(page.get_by_role("link", name="patient")).to_be_visible()
    expect(page.locator("#waiting")).to_be_hidden()
    assert len(dropped) == 4


def test_a_token_revoked_while_a_traceset_opens_returns_to_sign_in_not_a_401_panel(
    served: Served, page: Page, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    admin(data, "user", "create", "dave")
    issued = admin(data, "token", "create", "--user", "dave")
    upload(served, "watched", chakra_ranks(0), '{"shape":{"rankCount":1}}')
    sign_in(page, served, token=issued["token"])
    admin(data, "token", "revoke", issued["id"], json_output=False)
    page.get_by_role("link", name="watched").click()
    expect(page.get_by_role("alert")).to_contain_text("The service no longer accepts your token")
    expect(page.get_by_label("API token")).to_be_visible()
    # The view's own failure must not replace the sign-in form with a 401 panel.
    page.wait_for_timeout(500)
    expect(page.get_by_label("API token")).to_be_visible()
    expect(page.locator(".problem")).to_have_count(0)


def test_a_traceset_deleted_while_open_says_so_when_acted_on(served: Served, page: Page) -> None:
    made = upload(served, "going", chakra_ranks(0), '{"shape":{"rankCount":1}}')
    sign_in(page, served, path=f"/tracesets/{made.id}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("going")
    gone = httpx.delete(
        f"{served.url}/api/v1/tracesets/{made.id}",
        headers={"Authorization": f"Bearer {served.token}"},
    )
    assert gone.status_code == 204
    refused = httpx.post(
        f"{served.url}/api/v1/tracesets/{made.id}/validate",
        headers={"Authorization": f"Bearer {served.token}"},
    )
    assert refused.status_code >= 400
    page.get_by_role("button", name="Validate").click()
    expect(page.locator(".validation .error")).to_have_text(refused.json()["error"]["message"])
    page.get_by_role("button", name="Promote to tenant…").click()
    page.locator(".confirm-promote").click()
    expect(page.locator(".promote-error")).not_to_be_empty()
    after = httpx.get(
        f"{served.url}/api/v1/tracesets/{made.id}",
        headers={"Authorization": f"Bearer {served.token}"},
    )
    assert after.json()["status"] == "deleted"  # soft-deleted: still readable, as deleted
    page.reload()
    expect(page.locator(".detail-head .badge").first).to_have_text("deleted")
    expect(page.get_by_role("button", name="Validate")).to_be_disabled()
    expect(page.get_by_role("button", name="Promote to tenant…")).to_be_disabled()


def test_signing_in_while_the_service_does_not_answer_says_it_waits(
    served: Served, page: Page
) -> None:
    dropped: list[str] = []
    page.goto(served.url + "/")
    page.route(lambda url: "/api/v1/" in url, refuse_first(3, dropped))
    page.get_by_label("API token").fill(served.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#waiting")).to_contain_text("The service is not answering")
    expect(page.get_by_role("button", name="Sign in")).to_be_disabled()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    expect(page.locator("#waiting")).to_be_hidden()
    assert len(dropped) == 3


def test_another_tenants_traceset_is_not_found_and_its_name_never_shown(
    served: Served, page: Page, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    made = upload(served, "tenant-a-secret", chakra_ranks(0), '{"shape":{"rankCount":1}}')
    admin(data, "tenant", "create", "other")
    admin(data, "user", "create", "eve", "--tenant", "other")
    eve = admin(data, "token", "create", "--user", "eve")["token"]
    sign_in(page, served, path=f"/tracesets/{made.id}", token=eve)
    panel = page.locator('.problem[data-status="404"]')
    expect(panel.get_by_role("heading")).to_have_text("Not found")
    assert "tenant-a-secret" not in page.content()
    page.get_by_role("link", name="All tracesets").click()
    expect(page.locator(".empty")).to_contain_text("No tracesets yet")
