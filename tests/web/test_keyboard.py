"""The page by keyboard: after a view changes, focus is on its heading (a screen reader says
where it is); the census grid is one stop of the tab order, its cells reached by the arrows."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.support.seeding import chakra_ranks, sign_in, upload
from tests.support.served import Served


def test_focus_moves_to_the_new_views_heading_after_navigation(served: Served, page: Page) -> None:
    made = upload(served, "by-keyboard", chakra_ranks(0, 1), '{"shape":{"rankCount":2}}')
    sign_in(page, served)
    page.get_by_role("link", name="by-keyboard").focus()
    page.keyboard.press("Enter")
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text("by-keyboard")
    expect(heading).to_be_focused()
    assert page.url.endswith(f"/tracesets/{made.id}")
    page.go_back()
    expect(page.get_by_role("heading", level=1, name="Tracesets")).to_be_focused()


def test_the_census_grid_is_one_tab_stop_walked_by_the_arrow_keys(
    served: Served, page: Page
) -> None:
    made = upload(served, "grid-keys", chakra_ranks(0, 1, 2), '{"shape":{"rankCount":40}}')
    sign_in(page, served, path=f"/tracesets/{made.id}")
    cells = page.locator(".census-grid .cell")
    expect(cells).to_have_count(40)
    # One cell is in the tab order: tabbing past the grid takes one press, not forty.
    assert page.locator('.census-grid .cell[tabindex="0"]').count() == 1
    cells.nth(0).focus()
    page.keyboard.press("ArrowRight")
    expect(cells.nth(1)).to_be_focused()
    page.keyboard.press("End")
    expect(cells.nth(39)).to_be_focused()
    page.keyboard.press("Home")
    expect(cells.nth(0)).to_be_focused()
    per_row = page.evaluate(
        """() => { const cells = [...document.querySelectorAll('.census-grid .cell')];
                   return cells.filter((c) => c.offsetTop === cells[0].offsetTop).length; }"""
    )
    assert 1 < per_row < 40
    page.keyboard.press("ArrowDown")
    expect(cells.nth(per_row)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".rank-detail")).to_contain_text(f"Rank {per_row}: missing")
    expect(cells.nth(per_row)).to_have_attribute("tabindex", "0")
    page.keyboard.press("Tab")
    focused_rank = page.evaluate("document.activeElement.dataset.rank ?? null")
    assert focused_rank is None  # the next control after the grid, not another cell
