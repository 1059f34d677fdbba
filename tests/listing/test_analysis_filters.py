"""List filters and the sort on the analysis summary (issue 44, item 3): ``minIdlePct``,
``maxIdlePct``, ``minOverlapPct`` and ``sort=step_time``, through every visibility arm, with
ties and tracesets never analysed, page by page."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.paths import TESTDATA
from tests.support.uploading import upload
from tests.support.world import LIST, World, add, list_all
from tracestore.server import db

# (idle, overlap, step time) per traceset; None where the analysis has no such number.
MEDIANS: list[tuple[float | None, float | None, float | None]] = [
    (12.5, 40.0, 1500.0),
    (20.0, 55.5, 1500.0),  # a tie on the step time
    (20.01, None, 900.25),
    (55.0, 80.0, None),  # analysed, no steps
    (0.0, 100.0, 2100.0),
    (100.0, 0.0, 1500.0),
    (None, None, None),  # never analysed
    (33.3, 60.0, 3000.5),
    (None, None, None),
]
SCOPES = ["workspace", "workspace", "tenant", "public", "workspace", "tenant"]


@pytest.fixture
def analysed(world: World, clock: FakeClock) -> list[dict[str, Any]]:
    """Tracesets in the admin's workspaces, the tenant and the public, created in pairs (ties
    on the creation time), each with the medians of MEDIANS (cycled)."""
    records = []
    base = clock()
    for i in range(24):
        idle, overlap, step = MEDIANS[i % len(MEDIANS)]
        scope = SCOPES[i % len(SCOPES)]
        workspace = world.ws1 if i % 4 == 1 else None
        created = base + timedelta(seconds=i // 2)
        traceset_id = add(
            world, workspace, name=f"run-{i:02d}", created=created, scope=scope, size=i % 3
        )
        with world.services.db.session() as session:
            session.execute(
                update(db.Traceset)
                .where(db.Traceset.id == traceset_id)
                .values(median_idle_pct=idle, median_overlap_pct=overlap, median_step_time_us=step)
            )
        record = {"id": traceset_id, "name": f"run-{i:02d}", "created": created, "size": i % 3}
        records.append({**record, "idle": idle, "overlap": overlap, "step": step})
    add(world, world.ws2, name="not visible to the admin")  # bob's workspace
    return records


def _expected(records: list[dict[str, Any]], sort: str) -> list[str]:
    keys = [(part.split(":")[0], part.split(":")[1] == "desc") for part in sort.split(",")]
    ordered = sorted(records, key=lambda r: r["id"], reverse=keys[-1][1])
    for field, descending in reversed(keys):
        if field == "step_time":  # by step time, ties in creation order, the rest last
            ordered.sort(key=lambda r: r["created"], reverse=descending)
            present = [r for r in ordered if r["step"] is not None]
            present.sort(key=lambda r: r["step"], reverse=descending)
            ordered = present + [r for r in ordered if r["step"] is None]
        elif field == "name":
            ordered.sort(key=lambda r: r["name"], reverse=descending)
        else:
            ordered.sort(key=lambda r, f=field: r[f], reverse=descending)  # type: ignore[misc]
    return [r["id"] for r in ordered]


FILTERS: list[tuple[dict[str, str], Any]] = [
    ({"maxIdlePct": "20"}, lambda r: r["idle"] is not None and r["idle"] <= 20),
    ({"minIdlePct": "20"}, lambda r: r["idle"] is not None and r["idle"] >= 20),
    ({"minIdlePct": "20.005", "maxIdlePct": "60"}, lambda r: r["idle"] in (20.01, 55.0, 33.3)),
    ({"minIdlePct": "100"}, lambda r: r["idle"] == 100),
    ({"maxIdlePct": "0"}, lambda r: r["idle"] == 0),
    ({"minOverlapPct": "55.5"}, lambda r: r["overlap"] is not None and r["overlap"] >= 55.5),
    ({"minOverlapPct": "0"}, lambda r: r["overlap"] is not None),
    (
        {"minOverlapPct": "50", "maxIdlePct": "50", "sort": "step_time:desc"},
        lambda r: (r["overlap"] or 0) >= 50 and r["idle"] is not None and r["idle"] <= 50,
    ),
]


@pytest.mark.parametrize(
    ("params", "matches"), FILTERS, ids=lambda v: str(v)[:50] if isinstance(v, dict) else None
)
def test_the_analysis_filters_select_exactly_the_matching_tracesets(
    world: World, analysed: list[dict[str, Any]], params: dict[str, str], matches: Any
) -> None:
    found = list_all(world.clients["admin"], params, limit=2)
    expected = {r["id"] for r in analysed if matches(r)}
    assert {item["id"] for item in found} == expected and expected
    assert len(found) == len(expected)


SORTS = [
    "step_time:asc",
    "step_time:desc",
    "step_time:desc,name:asc",
    "name:desc,step_time:asc",
    "size:asc,step_time:desc",
]


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("limit", [1, 4])
def test_step_time_sorts_page_through_ties_and_the_unanalysed_last(
    world: World, analysed: list[dict[str, Any]], sort: str, limit: int
) -> None:
    items = list_all(world.clients["admin"], {"sort": sort}, limit=limit)
    assert [item["id"] for item in items] == _expected(analysed, sort)


def test_step_time_sorts_within_one_scope_and_with_a_filter(
    world: World, analysed: list[dict[str, Any]]
) -> None:
    client = world.clients["admin"]
    tenant = [r for r in analysed if SCOPES[analysed.index(r) % len(SCOPES)] == "tenant"]
    items = list_all(client, {"sort": "step_time:desc", "scope": "tenant"}, limit=2)
    assert [i["id"] for i in items] == _expected(tenant, "step_time:desc")
    slow = [r for r in analysed if r["idle"] is not None and r["idle"] >= 20]
    items = list_all(client, {"sort": "step_time:asc", "minIdlePct": "20"}, limit=3)
    assert [i["id"] for i in items] == _expected(slow, "step_time:asc")


BAD = [
    ({"maxIdlePct": "101"}, "maxIdlePct must be a percentage from 0 to 100; got '101'"),
    ({"minIdlePct": "-1"}, "minIdlePct must be a percentage from 0 to 100"),
    ({"minOverlapPct": "1e2"}, "minOverlapPct must be a percentage from 0 to 100"),
    ({"minOverlapPct": "nan"}, "minOverlapPct must be a percentage from 0 to 100"),
    ({"maxIdlePct": ""}, "maxIdlePct must be a percentage from 0 to 100"),
    ({"sort": "step-time"}, "Invalid sort field: 'step-time'"),
]


@pytest.mark.parametrize(("params", "message"), BAD, ids=lambda v: str(v)[:40])
def test_bad_analysis_filters_are_400s_naming_them(
    world: World, params: dict[str, str], message: str
) -> None:
    response = world.clients["admin"].get(LIST, params=params)
    assert message in assert_error(response, 400, "VALIDATION_ERROR")["message"]


def test_a_cursor_is_bound_to_the_analysis_filters_and_sort(
    world: World, analysed: list[dict[str, Any]]
) -> None:
    client = world.clients["admin"]
    page = client.get(LIST, params={"maxIdlePct": "50", "limit": 1}).json()
    cursor = page["pagination"]["nextCursor"]
    assert cursor
    for other in ({"maxIdlePct": "40"}, {"maxIdlePct": "50", "sort": "step_time:asc"}):
        answer = client.get(LIST, params={**other, "limit": 1, "next": cursor})
        assert (
            "different sort or different filters"
            in assert_error(answer, 400, "VALIDATION_ERROR")["message"]
        )


def test_an_analysed_upload_is_found_by_its_summary(world: World) -> None:
    http = world.clients["admin"]
    kineto = TESTDATA / "kineto-dlrm-8ranks"
    files = {p.name: (p.read_bytes(), "primary") for p in sorted(kineto.iterdir())}
    traceset = upload(http, files, {"shape": {"rankCount": 8}})
    plain = add(world, name="never analysed")
    assert list_all(http, {"maxIdlePct": "100"}) == []  # pending: no summary yet
    world.services.wait_for_background()
    summary = http.get(f"{LIST}/{traceset['id']}/analysis").json()["summary"]
    idle, overlap = summary["idlePct"]["median"], summary["overlapPct"]["median"]
    assert (idle, overlap) == (54.61, 3.91)
    for params in (
        {"maxIdlePct": "54.61"},
        {"minIdlePct": "54.61", "maxIdlePct": "60"},
        {"minOverlapPct": "3.9"},
    ):
        assert [i["id"] for i in list_all(http, params)] == [traceset["id"]], params
    for params in ({"maxIdlePct": "54.6"}, {"minIdlePct": "54.62"}, {"minOverlapPct": "4"}):
        assert list_all(http, params) == [], params
    ordered = list_all(http, {"sort": "step_time:desc"})
    assert [i["id"] for i in ordered] == [traceset["id"], plain]
