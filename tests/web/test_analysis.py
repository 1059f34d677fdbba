"""The traceset page's analysis section (issue 44, item 5) in Chromium against a real
``tracestore serve``: the charts of a real set, ``pending`` while the jobs wait for a worker,
the heatmap at 1,024 ranks; and the issue's Must-show, a 64-rank set analysed by two
``tracestore worker`` processes beside ``serve --no-worker``, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
from contextlib import ExitStack
from pathlib import Path

import psycopg
from playwright.sync_api import Page, Route, expect

from tests.support.analysis_page import (
    KINETO,
    open_analysis,
    synthetic_answer,
    upload_files,
    wait_analysed,
)
from tests.support.kineto_traces import dlrm_ranks
from tests.support.paths import SCREENSHOTS
from tests.support.replica_processes import fresh_database, postgres, worker_process  # noqa: F401 - the fixture
from tests.support.served import Served, serving


def test_the_analysis_section_draws_a_real_sets_charts(served: Served, page: Page) -> None:
    traceset_id = upload_files(served, "dlrm", sorted(KINETO.iterdir()), 8)
    answer = wait_analysed(served, traceset_id)
    assert answer["status"] == "complete"
    section = open_analysis(page, served, traceset_id)
    expect(section).to_have_attribute("data-status", "complete")

    facts = section.locator("dl.analysis-facts")
    expect(facts).to_contain_text("Idle")
    expect(facts).to_contain_text("54.61 % (34.28 % – 75.75 %)")
    expect(facts).to_contain_text("Slowest / fastest rank1 / 7")
    # Compute / non-compute / idle: a column per rank, its hover text the rank's numbers.
    time_chart, overlap_chart, idle_chart = (
        section.locator("figure.chart:not(.heatmap-chart)").nth(i) for i in range(3)
    )
    expect(time_chart).to_have_attribute("data-columns", "8")
    first = answer["ranks"][0]["temporal"]
    expect(time_chart.locator("g.column title").first).to_have_text(
        f"rank 0: compute {first['computePct']:.2f} %, non-compute {first['nonComputePct']:.2f} %, "
        f"idle {first['idlePct']:.2f} % of 13.009 ms"
    )
    expect(time_chart.locator("rect.seg-compute")).to_have_count(8)
    expect(overlap_chart.locator("rect.seg-overlap")).to_have_count(8)
    # The step heatmap: every rank's row, every step's column; a cell tells its numbers.
    steps = sorted({s["step"] for entry in answer["ranks"] for s in entry["steps"]})
    canvas = section.locator("canvas.heatmap")
    expect(canvas).to_have_attribute("data-ranks", "8")
    expect(canvas).to_have_attribute("data-steps", str(len(steps)))
    box = canvas.bounding_box()
    assert box is not None and box["height"] >= 8 * 12
    canvas.hover(position={"x": 2, "y": 3 * 12 + 5})  # rank 3, the first step
    rank3 = next(s for s in answer["ranks"][3]["steps"] if s["step"] == steps[0])
    # Rank 3 computes 1.17 × the median rank (issue 45): its row says it is a straggler.
    why = {s["rank"]: s["reason"] for s in answer["summary"]["stragglers"]}
    assert why[3].startswith("rank 3 computes 1.17 ×")
    expect(section.locator(".heatmap-caption")).to_have_text(
        f"rank 3, step {steps[0]}: {rank3['durationUs'] / 1000:.3f} ms. Straggler: {why[3]}"
    )
    section.get_by_text("The step times as a table").click()
    expect(section.locator("details.step-table tbody tr")).to_have_count(8)
    # The kernels that took the most time over all ranks, with their kind.
    rows = section.locator("table.kernels tbody tr")
    expect(rows).to_have_count(15)
    expect(rows.first).to_have_attribute("data-kind", "COMMUNICATION")
    expect(rows.first.locator(".kernel-name")).to_contain_text("ncclKernel_SendRecv")
    expect(rows.first.locator("td").nth(2)).to_have_text("40")  # its calls on all 8 ranks
    # Idle time by cause, over all ranks and per rank.
    expect(section.locator('.idle-totals li[data-cause="host_wait"]')).to_contain_text("host_wait")
    expect(idle_chart).to_have_attribute("data-columns", "8")
    section.screenshot(path=str(SCREENSHOTS / "analysis.png"))


def test_pending_is_shown_while_the_jobs_wait_then_the_charts(page: Page, tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--no-worker") as served:
        traceset_id = upload_files(served, "waiting", sorted(KINETO.iterdir())[:2], 2)
        section = open_analysis(page, served, traceset_id)
        expect(section).to_have_attribute("data-status", "pending")
        expect(section.locator(".pending")).to_contain_text("Analysis pending")
        with worker_process(tmp_path, "worker", served.env, tmp_path / "data"):
            # The section asks again by itself: the charts come without a reload.
            expect(section).to_have_attribute("data-status", "complete", timeout=60_000)
        expect(section.locator("canvas.heatmap")).to_have_attribute("data-ranks", "2")


def test_the_heatmap_stays_readable_at_1024_ranks(served: Served, page: Page) -> None:
    traceset_id = upload_files(served, "one", sorted(KINETO.iterdir())[:1], 1)
    answer = synthetic_answer(1024, 12, slow=700)

    def fulfil(route: Route) -> None:
        route.fulfill(status=200, content_type="application/json", body=json.dumps(answer))

    page.route(f"**/api/v1/tracesets/{traceset_id}/analysis", fulfil)
    section = open_analysis(page, served, traceset_id)
    canvas = section.locator("canvas.heatmap")
    expect(canvas).to_have_attribute("data-ranks", "1024")
    # 1,024 ranks in at most 480 rows of pixels: three ranks a row, each row its slowest.
    expect(canvas).to_have_attribute("data-ranks-per-row", "3")
    box = canvas.bounding_box()
    assert box is not None and 300 <= box["height"] <= 482
    # The row of pixels holding rank 700 shows it, three times slower than its neighbours.
    caption = section.locator(".heatmap-caption")
    seen = []
    for y in range(700 // 3 - 3, 700 // 3 + 4):
        canvas.hover(position={"x": box["width"] / 2, "y": y + 0.5})
        seen.append(caption.text_content())
    assert "ranks 699–701 (the slowest: 700), step 6: 30.000 ms" in seen, seen
    assert "ranks 702–704 (the slowest: 704), step 6: 10.400 ms" in seen, seen
    expect(section.locator("figure.chart").first).to_have_attribute("data-columns", "1024")
    section.locator("canvas.heatmap").screenshot(
        path=str(SCREENSHOTS / "analysis-heatmap-1024.png")
    )


# --- Must show: 64 ranks, two workers, both engines ----------------------------------------


def _ran_by(database_url: str | None, data_dir: Path) -> tuple[set[str], set[str]]:
    """Who ran the trace_file jobs, and who analysed each file, from the tables."""
    jobs = "SELECT ran_by FROM jobs WHERE kind = 'trace_file' AND state = 'done'"
    files = "SELECT analyzed_by FROM file_analyses"
    if database_url is None:
        with sqlite3.connect(data_dir / "tracestore.db", timeout=30) as connection:
            return (
                {r[0] for r in connection.execute(jobs)},
                {r[0] for r in connection.execute(files)},
            )
    with psycopg.connect(database_url.replace("+psycopg", "")) as connection:
        return (
            {r[0] for r in connection.execute(jobs).fetchall()},
            {r[0] for r in connection.execute(files).fetchall()},
        )


def test_a_64_rank_set_is_analysed_by_two_workers_and_drawn(
    page: Page, tmp_path: Path, database_url: str | None
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for name, data in dlrm_ranks(64).items():  # the real sample's 8 ranks, as 64
        (traces / name).write_bytes(data)
    data_dir = tmp_path / "data"
    settings = {} if database_url is None else {"TRACESTORE_DATABASE_URL": database_url}
    with ExitStack() as stack:
        served = stack.enter_context(serving(data_dir, "--no-worker", env=settings))
        env = {**served.env, **settings}
        workers = [
            stack.enter_context(worker_process(tmp_path, f"worker{n}", env, data_dir))
            for n in (1, 2)
        ]
        traceset_id = upload_files(served, "dlrm-64", sorted(traces.iterdir()), 64)
        answer = wait_analysed(served, traceset_id, timeout=300)
        assert answer["status"] == "complete"
        assert [entry["rank"] for entry in answer["ranks"]] == list(range(64))
        assert answer["summary"]["rankCount"] == 64
        # Both workers took part: the jobs (and the stored analyses) say which ran them.
        ran_by, analysed_by = _ran_by(database_url, data_dir)
        pids = {owner.split(":")[1] for owner in ran_by}
        assert pids == {str(worker.pid) for worker in workers}, ran_by
        assert analysed_by == ran_by
        section = open_analysis(page, served, traceset_id)
        expect(section).to_have_attribute("data-status", "complete")
        expect(section.locator("canvas.heatmap")).to_have_attribute("data-ranks", "64")
        expect(section.locator("figure.chart").first).to_have_attribute("data-columns", "64")
        expect(section.locator("table.kernels tbody tr")).to_have_count(15)
        if database_url is None:
            section.screenshot(path=str(SCREENSHOTS / "analysis-64-ranks.png"))
