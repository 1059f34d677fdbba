"""The census verdict on list items and the one-traceset answer, and the ``census`` filter:
real uploads of the 8-rank Kineto sample, whole, without rank 3, and with 4 of its 8 ranks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.paths import TESTDATA
from tests.support.uploading import upload
from tests.support.world import LIST, World, add, list_all

KINETO = sorted((TESTDATA / "kineto-dlrm-8ranks").iterdir())


def _kineto_set(world: World, name: str, ranks: list[int]) -> str:
    files = {KINETO[r].name: (KINETO[r].read_bytes(), "primary") for r in ranks}
    done = upload(world.clients["admin"], files, {"shape": {"rankCount": 8}}, name=name)
    return str(done["id"])


@pytest.fixture
def sets(world: World) -> dict[str, str]:
    return {
        "whole": _kineto_set(world, "whole", list(range(8))),
        "no rank 3": _kineto_set(world, "no rank 3", [0, 1, 2, 4, 5, 6, 7]),
        "4 of 8": _kineto_set(world, "4 of 8", [0, 1, 2, 3]),
        "not inspected": add(world),  # a row with no recorded inspection
    }


def test_list_items_and_the_traceset_carry_the_census_verdict(
    world: World, sets: dict[str, str]
) -> None:
    http = world.clients["admin"]
    expected = {
        "whole": ("pass", 0),
        "no rank 3": ("fail", 1),
        "4 of 8": ("fail", 4),
        "not inspected": ("unknown", None),
    }
    items = {item["id"]: item for item in list_all(http, {}, limit=2)}
    for name, traceset_id in sets.items():
        item = items[traceset_id]
        assert (item["census"], item["missingRanks"]) == expected[name], name
        answer = http.get(f"{LIST}/{traceset_id}").json()
        assert (answer["census"], answer["missingRanks"]) == expected[name], name
    census = http.get(f"{LIST}/{sets['no rank 3']}").json()["inspection"]["census"]
    assert census["checks"]["rankCountMatches"]["passed"] is False  # what the verdict reads


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [("fail", {"no rank 3", "4 of 8"}), ("pass", {"whole"}), ("unknown", {"not inspected"})],
)
def test_the_census_filter_selects_by_verdict(
    world: World, sets: dict[str, str], verdict: str, expected: set[str]
) -> None:
    names = {v: k for k, v in sets.items()}
    for sort in ("created:desc", "name:asc", "rankCount:desc", "step_time:asc"):
        params: dict[str, Any] = {"census": verdict, "sort": sort}
        found = list_all(world.clients["admin"], params, limit=1)
        assert {names.get(item["id"], item["name"]) for item in found} == expected, sort
        assert {item["census"] for item in found} == {verdict}


def test_the_census_filter_combines_with_the_others_and_binds_the_cursor(
    world: World, sets: dict[str, str]
) -> None:
    http = world.clients["admin"]
    found = list_all(http, {"census": "fail", "search": "of 8"})
    assert [item["id"] for item in found] == [sets["4 of 8"]]
    page = http.get(LIST, params={"census": "fail", "limit": 1}).json()
    cursor = page["pagination"]["nextCursor"]
    other = http.get(LIST, params={"census": "pass", "limit": 1, "next": cursor})
    assert other.status_code == 400
    assert "different sort or different filters" in other.json()["error"]["message"]


@pytest.mark.parametrize("value", ["failed", "FAIL", "", "true"])
def test_a_bad_census_filter_is_a_400_naming_the_verdicts(world: World, value: str) -> None:
    response = world.clients["admin"].get(LIST, params={"census": value})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"] == (
        f"Invalid census: {value!r}. Valid verdicts: pass, fail, unknown"
    )
