"""The detail view: metadata exactly as stored, files, the rank census grid, checks, downloads,
validate and promote (its refusal in the API's words)."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from tests.support.paths import SCREENSHOTS, TESTDATA
from tests.support.seeding import chakra_ranks, get_traceset, sign_in, upload
from tests.support.served import Served

# Numbers JSON.parse would rewrite (1.0 → 1, 1e3 → 1000, the long integer rounded).
EXACT_METADATA = (
    '{"workload_family":"llm","workload_name":"gpt-3 \\"small\\"","shape":{"rankCount":4,'
    '"global_batch_size":1e3,"seq_len":2048},"parallelism":{"dp":4},"learning_rate":1.0,'
    '"seed":12345678901234567891,"tags":["a",true,null]}'
)


def open_from_the_list(page: Page, served: Served, name: str) -> None:
    sign_in(page, served)
    page.get_by_role("link", name=name, exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(name)


def test_the_census_grid_flags_the_missing_rank_and_the_metadata_is_shown_as_stored(
    served: Served, page: Page
) -> None:
    traceset = upload(served, "allreduce-3-of-4", chakra_ranks(0, 1, 2), EXACT_METADATA)
    stored = get_traceset(served, traceset.id).text
    assert '"learning_rate":1.0' in stored  # the API's own text, which the page must keep

    open_from_the_list(page, served, "allreduce-3-of-4")
    assert page.url == f"{served.url}/tracesets/{traceset.id}"
    cells = page.locator(".census-grid .cell")
    expect(cells).to_have_count(4)
    assert [cells.nth(rank).get_attribute("data-state") for rank in range(4)] == [
        "present",
        "present",
        "present",
        "missing",
    ]
    expect(page.locator(".census-problems")).to_contain_text("Missing ranks3")
    expect(page.locator("div.census")).not_to_contain_text("K / ET")  # Chakra: no halves
    census = json.loads(stored)["inspection"]["census"]
    expect(page.locator(".census p").first).to_have_text(
        "4 ranks expected (the declared rank count); 3 found, 1 missing."
    )
    check = page.locator('.check[data-check="rankCountMatches"]')
    expect(check).to_have_attribute("data-state", "failed")
    expect(check.locator(".check-message")).to_have_text(
        census["checks"]["rankCountMatches"]["message"]
    )
    cells.nth(1).click()
    expect(page.locator(".rank-detail")).to_contain_text("all_reduce.1.et (chakra)")
    cells.nth(3).click()
    expect(page.locator(".rank-detail")).to_contain_text("Rank 3: missing")
    expect(cells.nth(3)).to_have_attribute("aria-pressed", "true")
    expect(cells.nth(1)).to_have_attribute("aria-pressed", "false")

    tree = page.locator(".metadata .tree")
    for path, text in [
        ("learning_rate", "1.0"),
        ("shape.global_batch_size", "1e3"),
        ("seed", "12345678901234567891"),
        ("workload_name", '"gpt-3 \\"small\\""'),
        ("tags[1]", "true"),
        ("tags[2]", "null"),
    ]:
        expect(tree.locator(f'[data-path="{path}"] .value')).to_have_text(text)
    page.get_by_text("The JSON as stored").click()
    expect(page.locator("pre.raw-json")).to_have_text(EXACT_METADATA)

    rows = page.locator("table.files tbody tr")
    expect(rows).to_have_count(3)
    first = rows.nth(0).locator("td").all_inner_texts()
    assert first[:3] == ["all_reduce.0.et", "primary", "81 B"]
    assert first[3] == traceset.files[0].hash.removeprefix("sha256:")[:12] + "…"  # type: ignore[union-attr]
    assert first[4:6] == ["0", "chakra_et"]
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SCREENSHOTS / "detail.png"))


def test_kineto_and_execution_trace_halves_show_per_rank(served: Served, page: Page) -> None:
    # Rank 0 has both halves (a Kineto timeline and an execution trace), rank 1 only its
    # execution trace.
    kineto = sorted((TESTDATA / "kineto-dlrm-8ranks").iterdir())[0]
    et = sorted((TESTDATA / "pytorch-et-resnet50-ddp-2ranks").iterdir())
    upload(served, "halves", [kineto, *et], '{"shape":{"rankCount":2}}')
    open_from_the_list(page, served, "halves")
    cells = page.locator(".census-grid .cell")
    expect(cells).to_have_count(2)
    expect(page.locator(".legend")).to_contain_text("K / ET")
    for rank, kineto_half in [(0, "on"), (1, "off")]:
        cell = cells.nth(rank)
        expect(cell).to_have_attribute("data-state", "present")
        expect(cell.locator('[data-half="executionTrace"]')).to_have_class("half on")
        expect(cell.locator('[data-half="kineto"]')).to_have_class(f"half {kineto_half}")
    expect(cells.nth(1)).to_have_attribute(
        "aria-label", "rank 1: present; Kineto timeline absent, execution trace present"
    )
    # Not ready for a tool is said as such, never as a FAILED check (issue 43, item 7).
    chakra = page.locator('.checks-panel .check[data-check="chakra_ready"]')
    expect(chakra).to_have_attribute("data-state", "not-ready")
    expect(chakra.locator(".check-state")).to_have_text("not ready")
    expect(page.locator("table.groups tbody tr").first).to_be_visible()


def test_promote_then_see_the_scope_change(served: Served, page: Page) -> None:
    traceset = upload(served, "to-promote", chakra_ranks(0, 1), '{"shape":{"rankCount":2}}')
    open_from_the_list(page, served, "to-promote")
    expect(page.locator("h1 [data-scope]")).to_have_text("workspace")
    # Where an upload lands: when it goes, and how to keep it (issue 43, item 2).
    expect(page.locator(".detail-head dl.head-facts")).to_contain_text(
        "7 days after its last use (a download counts); promote it to keep it"
    )
    page.get_by_role("button", name="Promote to tenant…").click()
    expect(page.get_by_text("Promote to tenant: everyone in your tenant")).to_be_visible()
    page.get_by_role("button", name="Promote to tenant", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="Promoted")).to_have_text(
        "Promoted: workspace → tenant."
    )
    expect(page.locator("h1 [data-scope]")).to_have_text("tenant")
    expect(page.get_by_role("button", name="Promote to public…")).to_be_visible()
    assert get_traceset(served, traceset.id).json()["scope"] == "tenant"
    expect(page.locator(".detail-head dl.head-facts")).to_contain_text("Expiresnever (promoted)")


def test_a_promotion_refused_for_its_census_can_be_forced(served: Served, page: Page) -> None:
    # Rank 2 of 3 is missing: the census fails, and promotion says so (issue 43, item 8).
    traceset = upload(served, "two-of-three", chakra_ranks(0, 1), '{"shape":{"rankCount":3}}')
    open_from_the_list(page, served, "two-of-three")
    page.get_by_role("button", name="Promote to tenant…").click()
    force = page.get_by_label("Promote it as it is, though its census fails")
    expect(force).to_be_hidden()
    with page.expect_response(lambda r: r.url.endswith("/promote")) as answered:
        page.get_by_role("button", name="Promote to tenant", exact=True).click()
    assert answered.value.status == 409
    expect(page.locator(".promote-error")).to_have_text(answered.value.json()["error"]["message"])
    expect(page.locator(".promote-error")).to_contain_text("rank_census: 1 of 3 ranks missing: 2")
    expect(page.locator(".promote-next")).to_contain_text("census fails can be promoted as it is")
    expect(page.locator("h1 [data-scope]")).to_have_text("workspace")
    force.check()
    page.get_by_role("button", name="Promote to tenant", exact=True).click()
    expect(page.locator("h1 [data-scope]")).to_have_text("tenant")
    assert get_traceset(served, traceset.id).json()["scope"] == "tenant"


def test_a_refused_promotion_shows_the_apis_message_exactly(served: Served, page: Page) -> None:
    # Upload stores cp unchecked; promotion's typed model refuses a cp that is no whole number.
    upload(
        served,
        "bad-cp",
        chakra_ranks(0, 1),
        '{"shape":{"rankCount":2},"parallelism":{"dp":2,"cp":1.5}}',
    )
    open_from_the_list(page, served, "bad-cp")
    page.get_by_role("button", name="Promote to tenant…").click()
    with page.expect_response(lambda r: r.url.endswith("/promote")) as answered:
        page.get_by_role("button", name="Promote to tenant", exact=True).click()
    response = answered.value
    assert response.status == 422
    message = response.json()["error"]["message"]
    assert "cp" in message
    expect(page.locator(".promote-error")).to_have_text(message)
    expect(page.locator("h1 [data-scope]")).to_have_text("workspace")
    page.locator(".promotion").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "promote-refused.png"))

    # Corrected metadata typed in the page goes with the promotion, stored as typed.
    page.get_by_label("with this workloadMetadata instead of the stored one").check()
    corrected = '{"shape":{"rankCount":2},"parallelism":{"dp":2,"cp":1},"note":2.50}'
    page.locator("textarea.metadata-edit").fill(corrected)
    page.get_by_role("button", name="Promote to tenant", exact=True).click()
    expect(page.locator("h1 [data-scope]")).to_have_text("tenant")
    stored = get_traceset(served, page.url.rsplit("/", 1)[1]).text
    assert stored.endswith(f'"workloadMetadata":{corrected}}}')
    expect(page.locator(".metadata .tree [data-path='note'] .value")).to_have_text("2.50")


def test_validate_and_the_three_downloads(served: Served, page: Page, tmp_path: Path) -> None:
    upload(served, "bytes", chakra_ranks(0, 1, 2), '{"shape":{"rankCount":3}}')
    open_from_the_list(page, served, "bytes")

    page.get_by_role("button", name="Validate").click()
    expect(page.locator(".validation [data-valid]")).to_have_text("Valid.")
    expect(page.locator('.validation [data-check="file_integrity"] .check-message')).to_have_text(
        "3 files present; sizes and SHA-256 re-verified (247 bytes)"
    )
    # No red row under the green verdict: a tool the set is not ready for is said apart,
    # as "not ready", not as a FAILED check of the traceset (issue 43, item 7).
    expect(page.locator(".validation .check.failed")).to_have_count(0)
    readiness = page.locator(".validation .readiness")
    expect(readiness.locator('[data-check="astra_ready"] .check-state')).to_have_text("ready")
    expect(readiness.locator('[data-check="hta_ready"] .check-state')).to_have_text("not ready")
    expect(readiness.locator('[data-check="hta_ready"]')).to_have_class(re.compile("not-ready"))

    with page.expect_download() as one:
        page.get_by_role("button", name="Download all_reduce.1.et").click()
    assert Path(one.value.path()).read_bytes() == chakra_ranks(1)[0].read_bytes()
    assert one.value.suggested_filename == "all_reduce.1.et"

    with page.expect_download() as archive:
        page.get_by_role("button", name="Download archive (ZIP)").click()
    with zipfile.ZipFile(archive.value.path()) as zipped:
        assert sorted(zipped.namelist()) == [f"all_reduce.{r}.et" for r in range(3)]

    page.get_by_role("textbox", name="Ranks").fill("1-2")
    with page.expect_download() as ranks:
        page.get_by_role("button", name="Download ranks").click()
    with zipfile.ZipFile(ranks.value.path()) as zipped:
        members = zipped.namelist()
    assert sorted(m for m in members if not m.startswith("_tracestore/")) == [
        "all_reduce.1.et",
        "all_reduce.2.et",
    ]

    page.get_by_role("textbox", name="Ranks").fill("7")
    with page.expect_response(lambda r: "/download?" in r.url) as answered:
        page.get_by_role("button", name="Download ranks").click()
    message = answered.value.json()["error"]["message"]
    expect(page.locator(".actions-panel > .error")).to_contain_text(message)


def test_a_traceset_that_is_not_ready_says_so(served: Served, page: Page) -> None:
    started = httpx.post(
        f"{served.url}/api/v1/tracesets/upload-url",
        headers={"Authorization": f"Bearer {served.token}"},
        json={
            "name": "half-way",
            "files": [{"name": "all_reduce.0.et", "size": 81, "role": "primary"}],
            "workloadMetadata": {"shape": {"rankCount": 1}},
        },
    ).json()
    sign_in(page, served, path=f"/tracesets/{started['tracesetId']}")
    expect(
        page.get_by_text("The traceset is uploading: downloads and validation need it ready.")
    ).to_be_visible()
    expect(page.get_by_role("button", name="Validate")).to_be_disabled()
    expect(page.locator("section.census")).to_contain_text(
        "Inspection runs once the traceset is ready"
    )


def test_a_census_past_the_grids_limit_still_names_every_missing_rank(
    served: Served, page: Page
) -> None:
    upload(served, "wide", chakra_ranks(0, 2), '{"shape":{"rankCount":5000}}')
    open_from_the_list(page, served, "wide")
    cells = page.locator(".census-grid .cell")
    expect(cells).to_have_count(4096)
    assert cells.nth(0).get_attribute("data-state") == "present"
    assert cells.nth(1).get_attribute("data-state") == "missing"
    assert cells.nth(2).get_attribute("data-state") == "present"
    expect(page.get_by_text("The grid shows ranks 0..4095 of 5000")).to_be_visible()
    expect(page.locator(".census-problems")).to_contain_text("Missing ranks1, 3..4999")


def test_unranked_and_duplicated_files_are_listed_under_the_grid(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = tmp_path / "messy"
    (folder / "retry").mkdir(parents=True)
    for rank in (0, 1):
        (folder / f"all_reduce.{rank}.et").write_bytes(chakra_ranks(rank)[0].read_bytes())
    (folder / "retry" / "all_reduce.1.et").write_bytes(chakra_ranks(1)[0].read_bytes())
    (folder / "stray.json").write_text('{"schemaVersion": 1, "traceEvents": []}')
    upload(served, "messy", [folder], '{"shape":{"rankCount":2}}')
    open_from_the_list(page, served, "messy")
    cells = page.locator(".census-grid .cell")
    expect(cells).to_have_count(2)
    expect(cells.nth(1)).to_have_attribute("data-state", "duplicated")
    problems = page.locator(".census-problems")
    expect(problems).to_contain_text("Rank 1 is in 2 files")
    expect(problems.locator("ul.unranked li")).to_have_text(["stray.json"])


def test_odd_numbers_repeated_keys_escapes_and_long_numbers_are_shown_as_stored(
    served: Served, page: Page
) -> None:
    # The service stores a 4,200-digit integer and a 5,000-digit fraction as written (its
    # limit is Python's 4,300 digits for integers, none for fractions); the page must too.
    # (Repeated keys and an integer -0 do not survive the client's and service's own JSON;
    # the page shows what is stored.)
    long_int = "7" * 4200
    long_fraction = "0." + "3" * 5000
    deep = '{"d":' * 40 + "-0.0" + "}" * 40
    metadata = (
        '{"shape":{"rankCount":1},"neg_zero":-0.0,"exp":1E+2,"past_u64":18446744073709551617,'
        f'"escaped":"\\u00e9\\ud83d\\ude00","long_int":{long_int},'
        f'"long_fraction":{long_fraction},"deep":{deep}}}'
    )
    traceset = upload(served, "odd-numbers", chakra_ranks(0), metadata)
    stored = get_traceset(served, traceset.id).text
    assert long_int in stored and long_fraction in stored
    sign_in(page, served, path=f"/tracesets/{traceset.id}")
    tree = page.locator(".metadata .tree")
    for path, text in [
        ("neg_zero", "-0.0"),
        ("exp", "1E+2"),
        ("past_u64", "18446744073709551617"),
        ("escaped", '"é😀"'),
        ("long_int", long_int),
        ("long_fraction", long_fraction),
        ("deep" + ".d" * 40, "-0.0"),
    ]:
        expect(tree.locator(f'[data-path="{path}"] .value')).to_have_text(text)
    page.get_by_text("The JSON as stored").click()
    raw = page.locator("pre.raw-json").inner_text()
    assert raw.startswith('{"shape"') and raw.endswith("}" * 41) and raw in stored


def test_a_census_of_only_unranked_files_lists_them_and_every_rank_missing(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = tmp_path / "strays"
    folder.mkdir()
    for name in ("a.json", "b.json"):
        (folder / name).write_text('{"schemaVersion": 1, "traceEvents": []}')
    upload(served, "strays", [folder], '{"shape":{"rankCount":2}}')
    open_from_the_list(page, served, "strays")
    expect(page.locator(".census-problems ul.unranked li")).to_have_text(["a.json", "b.json"])
    cells = page.locator(".census-grid .cell")
    expect(cells).to_have_count(2)
    assert [cells.nth(i).get_attribute("data-state") for i in range(2)] == ["missing"] * 2
    expect(page.locator(".census-problems")).to_contain_text("Missing ranks0..1")


def test_a_set_of_many_process_groups_shows_the_largest_and_says_how_many_more(
    served: Served, page: Page, tmp_path: Path
) -> None:
    """The process-groups table was uncapped where the census grid is capped: 50,000
    groups were 250,000 elements and 4.8 s of the page. Here 2,500 groups of sizes 1..2,500
    in one Kineto file (its pg_config)."""
    count = 2_500
    groups = [{"pg_name": f"g{size}", "pg_size": size} for size in range(1, count + 1)]
    trace = tmp_path / "rank0.json"
    info = {"rank": 0, "world_size": 1, "pg_config": groups}
    trace.write_text(json.dumps({"distributedInfo": info, "traceEvents": []}))
    made = upload(served, "many groups", [trace], '{"shape":{"rankCount":1}}')
    stored = get_traceset(served, made.id).json()["inspection"]["census"]["processGroups"]
    assert len(stored) == count  # what the API gives: every group
    open_from_the_list(page, served, "many groups")
    rows = page.locator("table.groups tbody tr")
    expect(rows).to_have_count(1000)
    expect(rows.first.locator("td").nth(1)).to_have_text(str(count))  # the largest first
    expect(page.locator(".groups-limit")).to_have_text(
        f"The table shows the 1000 largest of {count} process groups; "
        f"{count - 1000} groups not shown (the traceset's JSON lists them all)."
    )
