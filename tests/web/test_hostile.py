"""The page under attack: what a hostile uploader can put in a traceset (its name, file names,
description, tags, workload metadata), in a shared link's query string, or in a login's
callback is shown as text, never run; the page's structure and the CSP hold."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Page, expect

from tests.support.seeding import chakra_ranks, sign_in, upload, wait_inspected
from tests.support.served import Served
from tracestore import jsontext
from tracestore.client import Client

# Every payload sets a global when it runs; the CSP should stop most, the page's text-only
# rendering all of them.
XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
LISTEN = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) =>
  window.__violations.push(event.violatedDirective + " " + event.blockedURI));
"""


def _listen(page: Page) -> list[str]:
    errors: list[str] = []
    page.add_init_script(LISTEN)
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def _untouched(page: Page) -> None:
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("window.__violations") == []
    assert page.locator("main img, main script, main svg, main iframe").count() == 0


def test_hostile_names_metadata_and_files_are_shown_as_text(
    served: Served, page: Page, tmp_path: Path
) -> None:
    # File names are held to [A-Za-z0-9._+=@-] by the service; the rest is free text.
    metadata = (
        '{"workload_family":"' + XSS.replace('"', '\\"') + '",'
        '"' + XSS.replace('"', '\\"') + '":"javascript:alert(1)",'
        '"shape":{"rankCount":1}}'
    )
    with Client(served.url, served.token) as client:
        made = client.upload_traceset(
            chakra_ranks(0),
            name=XSS,
            workload_metadata=jsontext.loads(metadata),
            description=XSS + " javascript:alert(3)",
            tags=["<img src=x onerror=alert(4)>", "javascript:alert(4)"],
        )
    wait_inspected(served, made.id)
    errors = _listen(page)
    sign_in(page, served)
    name_link = page.locator("table.tracesets td:first-child a")
    expect(name_link).to_have_text(XSS)
    _untouched(page)
    # The family link puts the hostile value in the URL; the form reflects it as a value.
    page.get_by_title("Only this family").click()
    expect(page.get_by_label("Workload family")).to_have_value(XSS)
    expect(name_link).to_have_text(XSS)
    _untouched(page)
    name_link.click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(XSS)
    expect(page.locator(".description")).to_have_text(XSS + " javascript:alert(3)")
    expect(page.locator(".tags .tag")).to_have_text(
        ["<img src=x onerror=alert(4)>", "javascript:alert(4)"]
    )
    expect(page.locator(".metadata .tree")).to_contain_text(XSS)
    expect(page.locator("pre.raw-json")).to_contain_text('"javascript:alert(1)"')
    page.locator(".census-grid .cell").first.click()
    expect(page.locator(".rank-detail")).to_contain_text("all_reduce.0.et")
    _untouched(page)
    assert errors == []


def test_a_hostile_shared_link_and_the_apis_refusal_of_it_are_shown_as_text(
    served: Served, page: Page
) -> None:
    errors = _listen(page)
    sign_in(page, served, path="/?minRankCount=" + quote(XSS) + "&" + quote(XSS) + "=" + quote(XSS))
    problem = page.locator(".results .problem")
    expect(problem.get_by_role("heading")).to_have_text("The service refused the request")
    expect(page.get_by_label("Ranks at least")).to_have_value(XSS)
    expect(page.locator('textarea[name="workload"]')).to_have_value(f"{XSS}={XSS}")
    _untouched(page)
    assert errors == []


def _char_lefts(page: Page, selector: str) -> list[float]:
    """The left edge of each character of the first text in ``selector``, as laid out."""
    return list(
        page.locator(selector).first.evaluate(
            """(element) => {
              const text = element.firstChild;
              const lefts = [];
              for (let i = 0; i < text.length; i++) {
                const range = document.createRange();
                range.setStart(text, i);
                range.setEnd(text, i + 1);
                lefts.push(range.getBoundingClientRect().left);
              }
              return lefts;
            }"""
        )
    )


def test_a_bidi_override_in_a_name_or_key_cannot_reorder_what_follows_it(
    served: Served, page: Page
) -> None:
    rlo = "\u202e"  # RIGHT-TO-LEFT OVERRIDE, never closed
    made = upload(
        served,
        "evil" + rlo,
        chakra_ranks(0),
        '{"note' + rlo + '":12345,"shape":{"rankCount":1}}',
    )
    sign_in(page, served, path=f"/tracesets/{made.id}")
    expect(page.locator(".tree .value.number").first).to_have_text("12345")
    # The number's digits are laid out left to right: 12345 reads 12345, not 54321.
    lefts = _char_lefts(page, ".tree .value.number")
    assert lefts == sorted(lefts), lefts
    # The badges after the name keep their order: the status, then the scope.
    status = page.locator(".detail-head h1 .badge").nth(0).bounding_box()
    scope = page.locator(".detail-head h1 .badge").nth(1).bounding_box()
    assert status is not None and scope is not None
    assert status["x"] < scope["x"]


def test_huge_unbroken_names_files_and_values_do_not_push_the_page_sideways(
    served: Served, page: Page
) -> None:
    name = "n" * 255  # the longest name the service takes, with nowhere to break
    long_value = "v" * 3000
    long_key = "k" * 300
    with Client(served.url, served.token) as client:
        made = client.upload_traceset(
            chakra_ranks(0),
            name=name,
            workload_metadata={"shape": {"rankCount": 1}, long_key: long_value},
            description="d" * 4096,
            tags=["t" * 64, "u" * 64],
        )
    wait_inspected(served, made.id)
    sign_in(page, served)
    expect(page.locator("table.tracesets td:first-child a")).to_have_text(name)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    page.locator("table.tracesets td:first-child a").click()
    expect(page.locator(".tree .value.string")).to_have_text(f'"{long_value}"')
    page.get_by_text("The JSON as stored").click()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280


def test_a_link_with_broken_percent_encoding_shows_the_not_found_panel(
    served: Served, page: Page
) -> None:
    errors = _listen(page)
    sign_in(page, served, path="/tracesets/%E0%A4%A")
    expect(page.locator('.problem[data-status="404"]').get_by_role("heading")).to_have_text(
        "Not found"
    )
    assert errors == []
