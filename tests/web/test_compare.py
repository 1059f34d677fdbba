"""The comparison view (issue 45, item 3) in Chromium against a real ``tracestore serve``, on
SQLite and PostgreSQL: two tracesets ticked in the list open their comparison; the kernels
table lists the changes slower first with a bar each, the added and removed kernels and a
row per rank pair, as the API answers them; an analysis that is not complete is said so."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.analysis_page import upload_files, wait_analysed
from tests.support.paths import SCREENSHOTS
from tests.support.replica_processes import fresh_database, postgres  # noqa: F401 - the fixture
from tests.support.seeding import sign_in
from tests.support.served import Served, serving

KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto-dlrm-8ranks"
OLD, NEW = b"volta_sgemm_128x32_nt", b"volta_sgemm_128x64_nt"
FASTER = "CUDAFunctorOnSelf_add"


def _runs(directory: Path) -> tuple[list[Path], list[Path]]:
    """The real sample, and a second run of it: one GEMM kernel renamed (removed, another
    added), the all-reduces 30 % slower, an elementwise kernel 20 % faster, every other
    pageable copy gone."""
    samples = sorted(KINETO.iterdir())
    second = directory / "second"
    second.mkdir(parents=True)
    for sample in samples:
        trace = json.loads(sample.read_bytes().replace(OLD, NEW))
        events, copies = [], 0
        for event in trace["traceEvents"]:
            name = event.get("name", "")
            if event.get("cat") == "gpu_memcpy" and "Pageable -> Device" in name:
                copies += 1
                if copies % 2:
                    continue
            if event.get("cat") == "kernel" and name.startswith("ncclKernel_AllReduce"):
                event["dur"] = int(event["dur"] * 1.3)
            if event.get("cat") == "kernel" and FASTER in name:
                event["dur"] = int(event["dur"] * 0.8)
            events.append(event)
        trace["traceEvents"] = events
        (second / sample.name).write_text(json.dumps(trace))
    return samples, sorted(second.iterdir())


@pytest.fixture(params=["sqlite", "postgresql"])
def compared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    settings = {}
    if request.param == "postgresql":
        url = fresh_database(request.getfixturevalue("postgres"))
        settings["TRACESTORE_DATABASE_URL"] = url
    with serving(tmp_path / "data", env=settings) as served:
        served.env.update(settings)
        yield served


def _comparison(served: Served, base: str, other: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{served.url}/api/v1/tracesets/{base}/compare",
        params={"with": other},
        headers={"Authorization": f"Bearer {served.token}"},
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_two_ticked_tracesets_open_their_comparison(
    compared: Served, page: Page, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    first, second = _runs(tmp_path)
    base = upload_files(compared, "yesterday", first, 8)
    other = upload_files(compared, "today", second, 8)
    for traceset_id in (base, other):
        assert wait_analysed(compared, traceset_id)["status"] == "complete"
    expected = _comparison(compared, base, other)

    sign_in(page, compared, "/")
    compare = page.get_by_role("button", name="Compare", exact=True)
    expect(compare).to_be_disabled()
    page.get_by_label("Compare yesterday").check()
    expect(compare).to_be_disabled()
    page.get_by_label("Compare today").check()
    expect(page.locator(".compare-bar")).to_contain_text("Base yesterday → other today")
    compare.click()
    expect(page).to_have_url(f"{compared.url}/compare?base={base}&other={other}")

    view = page.locator("section.comparison")
    expect(view).not_to_have_attribute("aria-busy", "true")
    rows = view.locator("table.compare-kernels tbody tr")
    changed = [k for k in expected["kernels"] if k["diffDurationUs"] != 0]
    expect(rows).to_have_count(min(50, len(changed)))
    names = rows.locator("td.kernel-name").all_inner_texts()
    assert names == [k["name"] for k in changed[:50]]
    same = len(expected["kernels"]) - len(changed)
    expect(view).to_contain_text(f"{same} kernel names whose time did not change are not listed")
    slower = [k for k in expected["kernels"] if k["diffDurationUs"] > 0]
    assert slower, "the second run has slower kernels"
    expect(rows.first).to_have_class(re.compile("slower"))
    expect(rows.first.locator("svg.change-bar rect.change-slower")).to_have_count(1)
    faster = view.locator("table.compare-kernels tr.faster svg.change-bar rect.change-faster")
    expect(faster.first).to_be_visible()
    # The largest change's bar is the longest: the whole half of its cell.
    assert rows.first.locator("rect").get_attribute("width") == "100"
    expect(view.locator(".name-list.added li")).to_have_text([NEW.decode()])
    expect(view.locator(".name-list.removed li")).to_have_text([OLD.decode()])
    expect(view.locator("table.compare-ranks tbody tr")).to_have_count(8)
    first_rank = view.locator("table.compare-ranks tbody tr").first.locator("td")
    expect(first_rank.nth(0)).to_have_text("0")
    expect(first_rank.nth(1)).to_have_text("0")
    expect(view.locator("dl.analysis-facts")).to_contain_text("1 added, 1 removed, 0 called")
    expect(view.locator("dl.analysis-facts")).to_contain_text("1 called less")
    if request.node.callspec.params["compared"] == "sqlite":
        page.locator("main").screenshot(path=str(SCREENSHOTS / "compare.png"))

    # Not complete: a traceset without a Kineto trace has no analysis to compare.
    plain = tmp_path / "notes.txt"
    plain.write_text("not a trace\n")
    none = upload_files(compared, "notes", [plain], 1)
    page.goto(f"{compared.url}/compare?base={base}&other={none}")
    problem = page.locator("section.problem")
    expect(problem).to_have_attribute("data-status", "409")
    expect(problem).to_contain_text(f"Traceset '{none}' has no complete analysis")
