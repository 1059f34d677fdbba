"""The list view: its filters, sorts and pages, and a URL that carries them (shareable)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Browser, Page, expect

from tests.support.paths import SCREENSHOTS
from tests.support.seeding import chakra_ranks, sign_in, upload
from tests.support.served import Served
from tracestore.choices import SCOPES, STATUSES


def names(page: Page) -> list[str]:
    return page.locator("table.tracesets tbody tr td:first-child").all_inner_texts()


def query(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def test_filter_to_one_workload_family_and_the_url_carries_it_to_another_tab(
    served: Served, page: Page, browser: Browser
) -> None:
    upload(
        served, "gpt-small", chakra_ranks(0), '{"workload_family":"llm","shape":{"rankCount":1}}'
    )
    upload(
        served, "gpt-large", chakra_ranks(0, 1), '{"workload_family":"llm","shape":{"rankCount":2}}'
    )
    upload(
        served, "resnet", chakra_ranks(0), '{"workload_family":"vision","shape":{"rankCount":1}}'
    )

    sign_in(page, served)
    expect(page.locator("table.tracesets tbody tr")).to_have_count(3)
    page.get_by_label("Workload family").fill("llm")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.locator("table.tracesets tbody tr")).to_have_count(2)
    assert sorted(names(page)) == ["gpt-large", "gpt-small"]
    assert query(page) == {"workload_family": ["llm"]}
    row = page.locator("table.tracesets tbody tr", has_text="gpt-large")
    assert row.locator("td").all_inner_texts()[1:9] == [
        "llm", "—", "2", "2", "164 B", "ready", "pass", "workspace"
    ]  # fmt: skip
    page.screenshot(path=str(SCREENSHOTS / "list.png"))

    # The whole view from the URL alone: a colleague's tab, a reload, the browser's back.
    shared = page.url
    other = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    sign_in(other, served, path=urlsplit(shared).path + "?" + urlsplit(shared).query)
    expect(other.locator("table.tracesets tbody tr")).to_have_count(2)
    expect(other.get_by_label("Workload family")).to_have_value("llm")
    other.context.close()
    page.reload()
    expect(page.locator("table.tracesets tbody tr")).to_have_count(2)
    page.go_back()
    expect(page.locator("table.tracesets tbody tr")).to_have_count(3)
    assert query(page) == {}

    # A family cell filters to its family.
    page.locator("table.tracesets tbody tr", has_text="resnet").get_by_role(
        "link", name="vision"
    ).click()
    expect(page.locator("table.tracesets tbody tr")).to_have_count(1)
    assert query(page) == {"workload_family": ["vision"]}


def test_every_kind_of_filter_round_trips_through_the_url(served: Served, page: Page) -> None:
    upload(
        served, "bs1024", chakra_ranks(0, 1), '{"shape":{"rankCount":2,"global_batch_size":1024}}'
    )
    upload(served, "bs512", chakra_ranks(0, 1), '{"shape":{"rankCount":2,"global_batch_size":512}}')
    upload(served, "four", chakra_ranks(0, 1, 2, 3), '{"shape":{"rankCount":4}}')
    shared = (
        "/?search=bs&minRankCount=2&maxRankCount=2&status=ready&scope=workspace"
        "&inspected.format=chakra_et&createdAfter=2020-01-01&sort=name:asc&limit=50"
        "&shape.global_batch_size=1024"
    )
    sign_in(page, served, path=shared)
    expect(page.locator("table.tracesets tbody tr")).to_have_count(1)
    assert names(page) == ["bs1024"]
    for label, value in [
        ("Name contains", "bs"),
        ("Ranks at least", "2"),
        ("Ranks at most", "2"),
        ("Status", "ready"),
        ("Scope", "workspace"),
        ("Trace format (inspected)", "chakra_et"),
        ("Created from", "2020-01-01"),
        ("Sort", "name:asc"),
        ("Per page", "50"),
    ]:
        expect(page.get_by_label(label, exact=True)).to_have_value(value)
    expect(page.get_by_label("Other workload filters (one path=value a line)")).to_have_value(
        "shape.global_batch_size=1024"
    )
    # The status and scope choices are the service's own (the shell carries them).
    options = page.get_by_label("Status", exact=True).locator("option")
    expect(options).to_have_text(["any but deleted", *STATUSES])
    expect(page.get_by_label("Scope", exact=True).locator("option")).to_have_text(["any", *SCOPES])
    # Applying the form unchanged gives the same query back.
    before = query(page)
    page.get_by_role("button", name="Apply filters").click()
    expect(page.locator("table.tracesets tbody tr")).to_have_count(1)
    assert query(page) == before

    page.get_by_label("Other workload filters (one path=value a line)").fill("")
    page.get_by_label("Name contains").fill("")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.locator("table.tracesets tbody tr")).to_have_count(2)
    assert names(page) == ["bs1024", "bs512"]
    # A sortable column's header sorts by it, the other way on a second click.
    page.get_by_role("link", name="Name ▲").click()
    expect(page.locator("table.tracesets tbody tr").first).to_contain_text("bs512")
    assert query(page)["sort"] == ["name:desc"]


def test_a_filter_the_api_refuses_shows_its_message_beside_the_form(
    served: Served, page: Page
) -> None:
    sign_in(page, served, path="/?minRankCount=two")
    expect(page.get_by_role("alert")).to_contain_text(
        "minRankCount must be an integer from 0 to 9223372036854775807; got 'two'"
    )
    page.get_by_label("Ranks at least").fill("1")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.get_by_text("No tracesets match these filters.")).to_be_visible()
    page.get_by_label("Other workload filters (one path=value a line)").fill("no-equals-sign")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.get_by_role("alert")).to_contain_text("Write each workload filter as path=value")


def test_pages_go_forward_and_back_by_the_apis_cursors(served: Served, page: Page) -> None:
    for name in ["a", "b", "c", "d", "e"]:
        upload(served, name, chakra_ranks(0), '{"shape":{"rankCount":1}}', inspected=False)
    sign_in(page, served, path="/?sort=name:asc&limit=2")
    expect(page.get_by_text("Page 1 · 2 shown")).to_be_visible()
    assert names(page) == ["a", "b"]
    next_page = page.get_by_role("button", name="Next →")
    previous = page.get_by_role("button", name="← Previous")
    expect(previous).to_be_disabled()
    next_page.click()
    expect(page.get_by_text("Page 2 · 2 shown")).to_be_visible()
    assert names(page) == ["c", "d"]
    assert "next" in query(page)
    next_page.click()
    expect(page.get_by_text("Page 3 · 1 shown · the last page")).to_be_visible()
    assert names(page) == ["e"]
    expect(next_page).to_be_disabled()
    previous.click()
    expect(page.get_by_text("Page 2 · 2 shown")).to_be_visible()
    assert names(page) == ["c", "d"]
    page.go_back()  # the browser's own back: page 3 again, from its URL
    expect(page.get_by_text("Page 3 · 1 shown")).to_be_visible()
    page.get_by_role("link", name="First page").click()
    expect(page.get_by_text("Page 1 · 2 shown")).to_be_visible()
    assert names(page) == ["a", "b"] and "next" not in query(page)


def test_sign_out_forgets_the_token(served: Served, page: Page) -> None:
    sign_in(page, served)
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API token")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('tracestore.token')") is None
    page.reload()
    expect(page.get_by_label("API token")).to_be_visible()


def test_a_shared_link_with_a_repeated_filter_gets_the_apis_refusal_not_one_of_them(
    served: Served, page: Page
) -> None:
    # The URL is the list route's query as it is: the API refuses a filter given twice, and
    # the page must not quietly query with only the last of them.
    upload(served, "only-ready", chakra_ranks(0), '{"shape":{"rankCount":1}}')
    sign_in(page, served, path="/?status=ready&status=deleted")
    problem = page.locator(".results .problem")
    expect(problem.locator(".problem-message")).to_have_text(
        "Query parameter 'status' is given more than once"
    )
    expect(page.locator("table.tracesets")).to_have_count(0)
