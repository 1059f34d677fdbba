"""An incomplete traceset never looks complete on the page: the list marks a set missing
rank 3, or 4 of its 8 ranks, and filters by the census; the detail's header says the census
failed; the upload view takes the census before it sends. On both engines: a real
``tracestore serve`` on SQLite, and on PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, Request, expect

from tests.support.paths import TESTDATA
from tests.support.replica_processes import fresh_database, postgres  # noqa: F401 - the fixture
from tests.support.seeding import sign_in, upload
from tests.support.served import Served, serving
from tests.support.upload_page import fill_rank_count, open_upload_view, upload_done
from tracestore import metadata
from tracestore.cli.common import census_problems

KINETO = sorted((TESTDATA / "kineto-dlrm-8ranks").iterdir())
SETS = {"whole": range(8), "no-rank-3": [0, 1, 2, 4, 5, 6, 7], "half": [0, 1, 2, 3]}


@pytest.fixture(params=["sqlite", "postgresql"])
def served_on(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    """``tracestore serve`` on a fresh SQLite data directory, or on a fresh PostgreSQL
    database."""
    env = {"TRACESTORE_TOKEN_CACHE_SECONDS": "0"}
    if request.param == "postgresql":
        env["TRACESTORE_DATABASE_URL"] = fresh_database(request.getfixturevalue("postgres"))
    with serving(tmp_path / "data", env=env) as service:
        yield service


def _seed(served: Served) -> dict[str, str]:
    metadata = '{"workload_family":"dlrm","shape":{"rankCount":8}}'
    return {
        name: upload(served, name, [KINETO[r] for r in ranks], metadata).id
        for name, ranks in SETS.items()
    }


def test_the_list_marks_incomplete_sets_and_filters_by_census(
    served_on: Served, page: Page
) -> None:
    _seed(served_on)
    sign_in(page, served_on)
    rows = page.locator("table.tracesets tbody tr")
    expect(rows).to_have_count(3)

    def row(name: str) -> dict[str, str]:
        cells = rows.filter(has_text=name).locator("td")
        return {
            "status": cells.nth(6).inner_text(),
            "status class": cells.nth(6).locator(".badge").get_attribute("class") or "",
            "census": cells.nth(7).inner_text(),
            "census class": cells.nth(7).locator(".badge").get_attribute("class") or "",
        }

    whole, no_rank_3, half = row("whole"), row("no-rank-3"), row("half")
    assert (whole["status"], whole["census"]) == ("ready", "pass")
    assert "status-ready" in whole["status class"] and "census-pass" in whole["census class"]
    for shown, missing in ((no_rank_3, 1), (half, 4)):
        assert shown["census"] == f"fail · {missing} missing"
        assert "census-fail" in shown["census class"]
        # Not the green "ready" of a complete set.
        assert "status-ready" not in shown["status class"], shown
        assert "status-incomplete" in shown["status class"], shown

    page.get_by_label("Rank census").select_option("fail")
    page.get_by_role("button", name="Apply filters").click()
    expect(rows).to_have_count(2)
    assert sorted(rows.locator("td:first-child").all_inner_texts()) == ["half", "no-rank-3"]
    assert parse_qs(urlsplit(page.url).query) == {"census": ["fail"]}
    page.reload()  # the filter is in the URL
    expect(rows).to_have_count(2)
    expect(page.get_by_label("Rank census")).to_have_value("fail")
    page.get_by_label("Rank census").select_option("pass")
    page.get_by_role("button", name="Apply filters").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("whole")


def test_the_detail_header_says_the_census_failed(served_on: Served, page: Page) -> None:
    ids = _seed(served_on)
    for name, words in (
        ("no-rank-3", "census failed: 1 rank missing"),
        ("half", "census failed: 4 ranks missing"),
        ("whole", "census passed"),
    ):
        sign_in(page, served_on, path=f"/tracesets/{ids[name]}")
        heading = page.get_by_role("heading", level=1)
        expect(heading).to_contain_text(name)
        verdict = heading.locator("[data-census]")
        expect(verdict).to_have_text(words)
        status = heading.locator(".badge").first
        expect(status).to_have_text("ready")
        if name == "whole":
            expect(status).to_have_class("badge status-ready")
        else:
            expect(status).to_have_class("badge status-incomplete")
            expect(verdict).to_have_class("badge census-fail")
        page.get_by_role("button", name="Sign out").click()


def _folder(root: Path, ranks: Any) -> Path:
    root.mkdir()
    for rank in ranks:
        (root / KINETO[rank].name).write_bytes(KINETO[rank].read_bytes())
    return root


def test_the_upload_view_takes_the_census_before_sending(
    served_on: Served, page: Page, tmp_path: Path
) -> None:
    """Picked and described, a folder missing rank 3 (or 4 of 8) is said to fail its census,
    in the words ``tracestore upload`` warns with, before anything is created; a whole one
    passes."""
    started: list[str] = []

    def record(request: Request) -> None:
        if request.url.endswith("/upload-url"):
            started.append(request.url)

    page.on("request", record)
    open_upload_view(page, served_on)
    census = page.locator(".upload-census")
    button = page.get_by_role("button", name=re.compile("^Upload"))
    eight = {"shape": {"rankCount": 8}}
    for name, ranks, words in (
        (
            "no-rank-3",
            [0, 1, 2, 4, 5, 6, 7],
            "Rank census failed: 7 ranks found of 8 expected, 1 missing.",
        ),
        ("half", [0, 1, 2, 3], "Rank census failed: 4 ranks found of 8 expected, 4 missing."),
        ("whole", range(8), "Rank census passed: 8 ranks found of 8 expected."),
    ):
        folder = _folder(tmp_path / name, ranks)
        page.get_by_label("Choose a folder").set_input_files(folder)
        fill_rank_count(page, "8")
        expect(census.locator("p").first).to_have_text(words, timeout=30_000)
        paths = sorted(folder.iterdir())
        declared = metadata.check_upload_metadata(eight, has_primary_files=True)
        cli = census_problems(paths, "primary", eight, declared)  # what the CLI warns of
        assert census.locator("li").all_inner_texts() == cli
        if name == "whole":
            expect(census).to_have_attribute("data-census", "pass")
            expect(button).to_have_text("Upload")
        else:
            expect(census).to_have_attribute("data-census", "fail")
            expect(button).to_have_text("Upload anyway")
    assert started == []  # nothing sent yet
    button.click()
    traceset = upload_done(page)
    assert started and traceset["census"] == "pass"
