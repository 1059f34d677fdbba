"""Stragglers on the traceset page (issue 45, item 1) in Chromium against a real ``tracestore
serve``: a synthetic 8-rank run whose rank 5 computes 25 % longer, analysed by the serve's
worker on SQLite and on PostgreSQL; rank 5 is marked in the census grid and on the step
heatmap, with its reason."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import Page, Route, expect

from tests.support.analysis_page import (
    KINETO,
    open_analysis,
    synthetic_answer,
    upload_files,
    wait_analysed,
)
from tests.support.kineto_traces import straggler_run
from tests.support.paths import SCREENSHOTS
from tests.support.replica_processes import postgres  # noqa: F401 - the fixture
from tests.support.served import Served, serving


def test_the_straggler_is_marked_in_the_census_and_on_the_heatmap(
    page: Page,
    tmp_path: Path,
    database_url: str | None,
) -> None:
    paths = []
    for builder in straggler_run(8, steps=8, slow={5: 1.25}, jitter=0.03):
        paths.append(builder.write(tmp_path / f"rank{builder.rank}.pt.trace.json"))
    settings = {} if database_url is None else {"TRACESTORE_DATABASE_URL": database_url}
    with serving(tmp_path / "data", env=settings) as served:
        _marked(page, served, paths, screenshots=database_url is None)


def _marked(page: Page, served: Served, paths: list[Path], *, screenshots: bool) -> None:
    traceset_id = upload_files(served, "straggling", paths, 8)
    answer = wait_analysed(served, traceset_id)
    stragglers = answer["summary"]["stragglers"]
    assert [s["rank"] for s in stragglers] == [5]
    reason = stragglers[0]["reason"]
    assert reason.startswith("rank 5 computes 1.2")

    section = open_analysis(page, served, traceset_id)
    expect(section).to_have_attribute("data-status", "complete")
    listed = section.locator(".stragglers li")
    expect(listed).to_have_count(1)
    expect(listed).to_have_attribute("data-rank", "5")
    expect(listed).to_contain_text(reason)  # "rank 5" then the rest of the reason
    expect(listed).to_contain_text("its waits at collectives: ")

    # The census grid: rank 5's cell marked, its label and its detail giving the reason.
    marked = page.locator(".census-grid button.cell.straggler")
    expect(marked).to_have_count(1)
    expect(marked).to_have_attribute("data-rank", "5")
    expect(marked).to_have_attribute(
        "aria-label",
        f"rank 5: present; Kineto timeline present, execution trace absent; straggler: {reason}",
    )
    expect(page.locator("div.census .legend")).to_contain_text("straggler")
    marked.click()
    expect(page.locator(".rank-detail .straggler-reason")).to_have_text(f"Straggler: {reason}")
    if screenshots:
        page.locator("section.census").screenshot(path=str(SCREENSHOTS / "straggler-census.png"))
    # Another rank's cell is not marked.
    page.locator('.census-grid button.cell[data-rank="4"]').click()
    expect(page.locator(".rank-detail .straggler-reason")).to_have_count(0)

    # The heatmap: rank 5's row outlined and flagged, its caption saying why.
    canvas = section.locator("canvas.heatmap")
    expect(canvas).to_have_attribute("data-marked", "1")
    flag = section.locator(".rank-axis .straggler-mark")
    expect(flag).to_have_text("◆ 5")
    expect(flag).to_have_attribute("title", reason)
    canvas.hover(position={"x": 2, "y": 5 * 12 + 5})
    expect(section.locator(".heatmap-caption")).to_contain_text("rank 5, step 0: ")
    expect(section.locator(".heatmap-caption")).to_contain_text(f". Straggler: {reason}")
    canvas.hover(position={"x": 2, "y": 4 * 12 + 5})
    expect(section.locator(".heatmap-caption")).not_to_contain_text("Straggler")

    if screenshots:
        canvas.hover(position={"x": 2, "y": 5 * 12 + 5})
        section.screenshot(path=str(SCREENSHOTS / "straggler-analysis.png"))


def test_a_balanced_run_marks_none(served: Served, page: Page, tmp_path: Path) -> None:
    paths = [
        builder.write(tmp_path / f"rank{builder.rank}.pt.trace.json")
        for builder in straggler_run(4, jitter=0.03)
    ]
    traceset_id = upload_files(served, "balanced", paths, 4)
    assert wait_analysed(served, traceset_id)["summary"]["stragglers"] == []
    section = open_analysis(page, served, traceset_id)
    expect(section.locator(".stragglers.none")).to_contain_text("No straggler")
    expect(page.locator(".census-grid button.cell")).to_have_count(4)
    expect(page.locator(".census-grid button.cell.straggler")).to_have_count(0)
    expect(section.locator("canvas.heatmap")).to_have_attribute("data-marked", "0")


def test_many_stragglers_are_listed_twenty_and_all_marked(served: Served, page: Page) -> None:
    traceset_id = upload_files(served, "one", sorted(KINETO.iterdir())[:1], 1)
    answer = synthetic_answer(64, 4, slow=7)
    answer["summary"]["stragglers"] = [
        {"rank": r, "computeRatio": 1.2, "waitUs": 0, "lastArrivals": 0, "reason": f"rank {r} x"}
        for r in range(0, 50, 2)
    ]

    def fulfil(route: Route) -> None:
        route.fulfill(status=200, content_type="application/json", body=json.dumps(answer))

    page.route(f"**/api/v1/tracesets/{traceset_id}/analysis", fulfil)
    section = open_analysis(page, served, traceset_id)
    expect(section.locator(".stragglers li")).to_have_count(20)
    expect(section.locator(".stragglers")).to_contain_text("… and 5 more")
    expect(section.locator("canvas.heatmap")).to_have_attribute("data-marked", "25")
