"""Listing filters: each alone and combined, JSON typing, bad parameters, search, deleted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.envelopes import assert_error
from tests.support.world import LIST, World, add, list_all, member

Predicate = Callable[[dict[str, Any]], bool]


FILTER_CASES: list[tuple[dict[str, Any], Predicate]] = [
    ({}, lambda r: True),
    ({"status": "ready"}, lambda r: r["status"] == "ready"),
    ({"status": "uploading"}, lambda r: r["status"] == "uploading"),
    ({"status": "upload_failed"}, lambda r: r["status"] == "upload_failed"),
    # The reference's two other statuses: accepted, and nothing in tracestore has them.
    ({"status": "processing"}, lambda r: False),
    ({"status": "metadata_failed"}, lambda r: False),
    ({"scope": "workspace"}, lambda r: True),
    ({"scope": "public"}, lambda r: False),
    ({"search": "BETA"}, lambda r: "beta" in r["name"].lower()),
    ({"search": "run-3"}, lambda r: "run-3" in r["name"]),
    ({"search": "a-r"}, lambda r: "a-r" in r["name"].lower()),
    ({"search": "%"}, lambda r: False),
    ({"search": "_"}, lambda r: False),
    ({"minRankCount": 16}, lambda r: r["rank_count"] is not None and r["rank_count"] >= 16),
    ({"maxRankCount": 8}, lambda r: r["rank_count"] is not None and r["rank_count"] <= 8),
    ({"minRankCount": 9, "maxRankCount": 16}, lambda r: r["rank_count"] == 16),
    ({"workload_family": "gpt"}, lambda r: member(r, "workload_family") == "gpt"),
    ({"workload_name": "llama-1"}, lambda r: member(r, "workload_name") == "llama-1"),
    ({"precision": "fp8"}, lambda r: member(r, "precision") == "fp8"),
    ({"shape.global_batch_size": "1024"}, lambda r: member(r, "shape.global_batch_size") == 1024),
    ({"shape.global_batch_size": '"1024"'}, lambda r: False),
    ({"parallelism.tp": "8"}, lambda r: member(r, "parallelism.tp") == 8),
    ({"parallelism.tp": "8.0"}, lambda r: member(r, "parallelism.tp") == 8),
    ({"parallelism.pp": "1"}, lambda r: False),
    ({"shape": "1"}, lambda r: False),
    (
        {"workload_family": "llama", "shape.global_batch_size": "1024"},
        lambda r: (
            member(r, "workload_family") == "llama" and member(r, "shape.global_batch_size") == 1024
        ),
    ),
    (
        {"workload_family": "mixtral", "parallelism.tp": "2", "status": "uploading"},
        lambda r: (
            member(r, "workload_family") == "mixtral"
            and member(r, "parallelism.tp") == 2
            and r["status"] == "uploading"
        ),
    ),
    (
        {"search": "gamma", "minRankCount": 16, "precision": "bf16"},
        lambda r: (
            "gamma" in r["name"]
            and r["rank_count"] is not None
            and r["rank_count"] >= 16
            and member(r, "precision") == "bf16"
        ),
    ),
]


def _expected(records: list[dict[str, Any]], predicate: Predicate) -> list[str]:
    chosen = [r for r in records if predicate(r)]
    chosen.sort(key=lambda r: (r["created"], r["id"]), reverse=True)
    return [r["id"] for r in chosen]


@pytest.mark.parametrize(
    ("params", "predicate"),
    FILTER_CASES,
    ids=lambda v: str(v)[:60] if isinstance(v, dict) else None,
)
def test_each_filter_and_combination_selects_exactly_the_matching_tracesets(
    world: World,
    catalogue: list[dict[str, Any]],
    params: dict[str, Any],
    predicate: Predicate,
) -> None:
    items = list_all(world.clients["admin"], params, limit=4)
    assert [item["id"] for item in items] == _expected(catalogue, predicate)


def test_created_after_is_inclusive_and_created_before_exclusive(
    world: World, catalogue: list[dict[str, Any]]
) -> None:
    start = catalogue[8]["created"]  # the third second
    end = catalogue[16]["created"]
    stamp = {"createdAfter": start.isoformat(), "createdBefore": end.isoformat()}
    items = list_all(world.clients["admin"], stamp)
    expected = _expected(catalogue, lambda r: start <= r["created"] < end)
    assert [i["id"] for i in items] == expected and len(expected) == 8
    zulu = start.isoformat().replace("+00:00", "Z")
    assert len(list_all(world.clients["admin"], {"createdAfter": zulu})) == 16


def test_camel_case_members_are_not_matched_and_camel_case_parameters_refused(
    world: World,
) -> None:
    snake = add(world, metadata={"workload_family": "llama", "shape": {"global_batch_size": 8}})
    add(world, metadata={"workloadFamily": "llama", "shape": {"globalBatchSize": 8}})
    client = world.clients["admin"]
    assert [i["id"] for i in list_all(client, {"workload_family": "llama"})] == [snake]
    assert [i["id"] for i in list_all(client, {"shape.global_batch_size": 8})] == [snake]
    for name in ("workloadFamily", "shape.globalBatchSize"):
        response = client.get(LIST, params={name: "llama"})
        assert f"'{name}'" in assert_error(response, 400, "VALIDATION_ERROR")["message"]


@pytest.mark.parametrize(
    ("stored", "query", "matches"),
    [
        (1024, "1024", True),
        ("1024", "1024", False),
        ("1024", '"1024"', True),
        (1024, '"1024"', False),
        (2.5, "2.5", True),
        (2.0, "2", True),
        (True, "true", True),
        (True, "1", False),
        (1, "true", False),
        (False, "false", True),
        (None, "null", True),
        ("null", "null", False),
        ("llama 3", "llama 3", True),
        ("Llama", "llama", False),
        ({"a": 1}, "1", False),
        ([1, 2], "1", False),
        ("[1]", "[1]", True),
        # Integers beyond 64 bits: sqlite3 cannot bind them (a 500 once), PostgreSQL can.
        (2**70, str(2**70), True),
        (-(2**70), str(-(2**70)), True),
        (2**70, "1", False),
        (5, str(10**400), False),
    ],
)
def test_workload_filters_are_json_typed(
    world: World, stored: Any, query: str, matches: bool
) -> None:
    wanted = add(world, metadata={"shape": {"x": stored}})
    add(world, metadata={"shape": {"y": stored}})
    add(world, metadata={"shape": None})
    add(world)
    found = [i["id"] for i in list_all(world.clients["admin"], {"shape.x": query})]
    assert found == ([wanted] if matches else [])


BAD_PARAMETERS: list[tuple[dict[str, Any], str]] = [
    (
        {"sort": "x"},
        "Invalid sort field: 'x'. Valid fields: created, name, status, size, rankCount",
    ),
    ({"sort": "created_at:desc"}, "Invalid sort field: 'created_at'"),
    ({"sort": ""}, "Invalid sort field: ''"),
    ({"sort": "name:up"}, "'up' for 'name' in sort"),
    ({"sort": "name,name:desc"}, "'name' is given more than once in sort"),
    ({"limit": "abc"}, "limit must be an integer from 1 to 100; got 'abc'"),
    ({"limit": "0"}, "limit must be an integer"),
    ({"limit": "101"}, "limit must be an integer"),
    ({"limit": "2.0"}, "limit must be an integer"),
    ({"createdAfter": "yesterday"}, "createdAfter must be an RFC 3339 timestamp"),
    ({"createdBefore": "2026-11-30T09:00:00"}, "createdBefore must be an RFC 3339"),
    ({"createdBefore": "2026-13-30"}, "createdBefore must be"),
    # Valid text whose UTC falls outside years 1-9999 (an OverflowError, a 500 once).
    ({"createdAfter": "0001-01-01T00:00:00+00:01"}, "createdAfter must be an RFC 3339"),
    ({"createdBefore": "9999-12-31T23:59:59-00:01"}, "createdBefore must be an RFC 3339"),
    (
        {"status": "gone"},
        "Invalid status: 'gone'. Valid statuses: uploading, processing, ready, upload_failed, "
        "metadata_failed, deleted",
    ),
    ({"status": "Ready"}, "Invalid status: 'Ready'"),
    ({"scope": "world"}, "Invalid scope: 'world'"),
    ({"minRankCount": "many"}, "minRankCount must be an integer"),
    ({"maxRankCount": "1.5"}, "maxRankCount must be an integer"),
    ({"workloadFamily": "llama"}, "Unknown query parameter 'workloadFamily'"),
    ({"Status": "ready"}, "Unknown query parameter 'Status'"),
    ({"shape..x": "1"}, "Unknown query parameter 'shape..x'"),
    ({"shape.x-y": "1"}, "Unknown query parameter 'shape.x-y'"),
    ({".x": "1"}, "Unknown query parameter '.x'"),
    ({"next": "garbage"}, "next must be a cursor from pagination.nextCursor"),
    ({"workspaceId": ""}, "workspaceId"),
]


@pytest.mark.parametrize(("params", "message"), BAD_PARAMETERS, ids=lambda v: str(v)[:40])
def test_every_bad_parameter_is_a_400_naming_it(
    world: World, params: dict[str, Any], message: str
) -> None:
    response = world.clients["admin"].get(LIST, params=params)
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert message in error["message"], error


def test_a_parameter_given_twice_is_refused(world: World) -> None:
    response = world.clients["admin"].get(f"{LIST}?status=ready&status=deleted")
    assert (
        assert_error(response, 400, "VALIDATION_ERROR")["message"]
        == "Query parameter 'status' is given more than once"
    )


@pytest.mark.parametrize(
    ("search", "found"),
    [
        ("ÜNÏCODE", True),
        ("ünïcode ℝun", True),
        ("Σίσυφος", True),
        ("ΣΊΣΥΦ", True),  # a final Σ folds to ς in Python, to σ in PostgreSQL
        ("unicode", False),
        ("%", True),
        ("_", False),
        ("\\", True),
    ],
)
def test_search_ignores_case_beyond_ascii_and_takes_wildcards_literally(
    world: World, search: str, found: bool
) -> None:
    wanted = add(world, name="Ünïcode ℝun Σίσυφος 100% \\x")
    add(world, name="plain")
    items = list_all(world.clients["admin"], {"search": search})
    assert [i["id"] for i in items] == ([wanted] if found else [])


def test_deleted_tracesets_appear_only_when_asked_for(world: World) -> None:
    live = add(world, status="ready")
    gone = add(world, status="deleted")
    client = world.clients["admin"]
    assert [i["id"] for i in list_all(client, {})] == [live]
    assert [i["id"] for i in list_all(client, {"status": "deleted"})] == [gone]
