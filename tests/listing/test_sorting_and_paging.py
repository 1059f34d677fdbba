"""Listing sorts, pages and cursors: ties, stable order under inserts, tampered cursors."""

from __future__ import annotations

import base64
import json
import re
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import insert

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.world import (
    FAMILIES,
    ITEM_KEYS,
    LIST,
    World,
    add,
    list_all,
    member,
    traceset_row,
)
from tracestore.server import db
from tracestore.server.ids import new_id
from tracestore.server.listing.pages import encode_cursor
from tracestore.server.listing.query import CURSOR_PATTERN


def _sort_key(field: str, record: dict[str, Any]) -> Any:
    if field == "created":
        return record["created"]
    if field == "name":
        return record["name"].encode()
    if field == "rankCount":
        return record["rank_count"]
    return record[field]


def _sorted_ids(records: list[dict[str, Any]], sort: str) -> list[str]:
    keys = [(part.split(":")[0], part.split(":")[1] == "desc") for part in sort.split(",")]
    ordered = sorted(records, key=lambda r: r["id"], reverse=keys[-1][1])
    for field, descending in reversed(keys):
        if field == "rankCount":
            present = [r for r in ordered if r["rank_count"] is not None]
            present.sort(key=lambda r: r["rank_count"], reverse=descending)
            ordered = present + [r for r in ordered if r["rank_count"] is None]
        else:
            ordered.sort(key=lambda r, f=field: _sort_key(f, r), reverse=descending)  # type: ignore[misc]
    return [r["id"] for r in ordered]


SORTS = [
    "created:desc",
    "created:asc",
    "name:asc",
    "name:desc",
    "status:asc",
    "status:desc",
    "size:asc",
    "size:desc",
    "rankCount:asc",
    "rankCount:desc",
    "name:asc,created:desc",
    "status:desc,size:asc,name:desc",
    "rankCount:desc,name:asc",
    "size:desc,rankCount:asc,created:asc",
]


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("limit", [1, 5])
def test_sorts_page_through_ties_in_a_stable_order(
    world: World, catalogue: list[dict[str, Any]], sort: str, limit: int
) -> None:
    items = list_all(world.clients["admin"], {"sort": sort}, limit=limit)
    assert [i["id"] for i in items] == _sorted_ids(catalogue, sort)


@pytest.mark.parametrize("sort", ["created:desc", "name:asc", "size:desc,rankCount:asc"])
def test_sort_and_filters_combine(world: World, catalogue: list[dict[str, Any]], sort: str) -> None:
    params = {"sort": sort, "workload_family": "llama", "status": "ready"}
    items = list_all(world.clients["admin"], params, limit=2)
    chosen = [
        r for r in catalogue if member(r, "workload_family") == "llama" and r["status"] == "ready"
    ]
    assert [i["id"] for i in items] == _sorted_ids(chosen, sort) and chosen


def test_the_default_sort_is_newest_first_and_items_have_the_spec_shape(
    world: World, clock: FakeClock
) -> None:
    older = add(world, name="older", metadata={"workload_family": "llama", "other": 1})
    clock.advance(seconds=1)
    newer = add(world, name="newer", rank_count=None, size=7)
    page = world.clients["admin"].get(LIST).json()
    assert [item["id"] for item in page["items"]] == [newer, older]
    assert page["pagination"] == {"count": 2, "hasMore": False, "nextCursor": None}
    item = page["items"][1]
    assert set(item) == ITEM_KEYS
    assert item["workload"] == {"workload_family": "llama", "workload_name": None}
    assert item["createdAt"].endswith("Z")
    assert item["workspaceId"] == world.default_ws and item["scope"] == "workspace"
    assert page["items"][0]["rankCountDerived"] is None and page["items"][0]["totalSize"] == 7


def test_pages_neither_skip_nor_repeat_while_tracesets_are_added(
    world: World, clock: FakeClock
) -> None:
    original = {add(world, name=f"n{i % 4}", size=i % 3) for i in range(30)}
    clock.advance(seconds=1)
    for sort in ("created:desc", "created:asc", "name:asc", "size:desc"):
        seen: list[str] = []
        cursor = None
        for page_number in range(100):
            params: dict[str, Any] = {"sort": sort, "limit": 4}
            if cursor:
                params["next"] = cursor
            page = world.clients["admin"].get(LIST, params=params).json()
            seen.extend(item["id"] for item in page["items"])
            cursor = page["pagination"]["nextCursor"]
            # Newcomers at every position of the order, same timestamp as others included
            # (only for a while: after the cursor, in created:asc, they would never end).
            if page_number < 5:
                for name in ("n0", "n2", "zz", "a"):
                    add(world, name=name, size=1)
                clock.advance(microseconds=1)
            if cursor is None:
                break
        assert len(seen) == len(set(seen)), sort
        assert original <= set(seen), sort


def _first_cursor(client: httpx.Client, params: dict[str, Any]) -> str:
    page = client.get(LIST, params={**params, "limit": 2}).json()
    cursor = page["pagination"]["nextCursor"]
    assert isinstance(cursor, str)
    return cursor


def test_tampered_foreign_and_replayed_cursors_are_refused(
    world: World, catalogue: list[dict[str, Any]]
) -> None:
    client = world.clients["admin"]
    params: dict[str, Any] = {"sort": "name:asc", "workload_family": "llama"}
    cursor = _first_cursor(client, params)
    ok = client.get(LIST, params={**params, "next": cursor, "limit": 50})
    assert ok.status_code == 200 and ok.json()["pagination"]["count"] == 6
    payload, _, signature = cursor.partition(".")
    tampered = [
        payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1] + "." + signature,
        payload + "." + signature[:-1] + ("A" if signature[-1] != "A" else "B"),
        payload,
        "." + signature,
        cursor + "x",
        cursor + "é",
        "é." + signature,
        encode_cursor(b"another service's key", "x", ["a", "ts_1"]),
    ]
    for bad in tampered:
        response = client.get(LIST, params={**params, "next": bad})
        error = assert_error(response, 400, "VALIDATION_ERROR")
        # Not of a cursor's form (the OpenAPI description's pattern), or not signed by us.
        expected = (
            "Invalid cursor in 'next'"
            if re.fullmatch(CURSOR_PATTERN, bad)
            else "next must be a cursor from pagination.nextCursor"
        )
        assert expected in error["message"], bad
    replays = [
        {"sort": "name:desc", "workload_family": "llama"},
        {"sort": "name:asc"},
        {"sort": "name:asc", "workload_family": "gpt"},
        {**params, "status": "ready"},
        {**params, "search": "a"},
        {**params, "precision": "fp8"},
        {**params, "minRankCount": 1},
        {**params, "scope": "workspace"},
        {**params, "workspaceId": world.default_ws},
    ]
    for other in replays:
        response = client.get(LIST, params={**other, "next": cursor})
        assert (
            "different sort or different filters"
            in assert_error(response, 400, "VALIDATION_ERROR")["message"]
        )
    # Another caller (alice) may not replay the admin's cursor either.
    response = world.clients["alice"].get(LIST, params={**params, "next": cursor})
    assert response.status_code == 400


@pytest.mark.slow
def test_walking_every_page_of_5000_tracesets_gets_each_exactly_once(
    world: World, clock: FakeClock
) -> None:
    base = clock()
    rows = [
        traceset_row(
            new_id("ts"),
            world.tenant,
            world.default_ws,
            world.users["admin"],
            f"bulk-{i % 97:02d}",
            base + timedelta(seconds=i // 7),  # ties of seven
            "ready",
            "workspace",
            i % 13,
            None if i % 11 == 0 else i % 5 + 1,
            {"workload_family": FAMILIES[i % 3]},
        )
        for i in range(5000)
    ]
    with world.services.db.session() as session:
        session.execute(insert(db.Traceset), rows)
    expected = {row["id"] for row in rows}
    for sort in ("created:desc", "rankCount:asc,name:desc"):
        items = list_all(world.clients["admin"], {"sort": sort}, limit=100)
        ids = [item["id"] for item in items]
        assert len(ids) == 5000 and set(ids) == expected, sort


# Timestamps as SQLite may hold them when a row was written by other means than this
# service (an import by SQL, ``CURRENT_TIMESTAMP``): each a shape UTCDateTime never writes.
FOREIGN_TIMESTAMPS = [
    "{day} 12:00:00",  # CURRENT_TIMESTAMP's
    "{day} 12:00:00.5",
    "{day}T12:00:00Z",
    "{day}T12:00:00+00:00",
    "{day} 12:00:00.000000+00:00",
]


@pytest.mark.parametrize("sort", ["created:desc", "created:asc", "name:asc,created:desc"])
def test_pages_walk_rows_whose_stored_timestamps_are_in_other_shapes(
    world: World, clock: FakeClock, sort: str
) -> None:
    """The cursor compared the canonical text of a page's last timestamp with the stored
    text: a row stored as ``2026-01-01 12:00:00`` sorts before ``...12:00:00.000000``, so
    in created:desc it came after its own cursor again, and the pages never ended."""
    if world.services.db.dialect != "sqlite":
        pytest.skip("PostgreSQL stores a timestamptz, not text")
    day = clock().date().isoformat()
    ours = {add(world, name="same") for _ in range(3)}  # canonical, the same instant
    foreign = set()
    for shape in FOREIGN_TIMESTAMPS * 2:
        traceset_id = add(world, name="same")
        with world.services.db.engine.begin() as connection:
            connection.exec_driver_sql(
                "UPDATE tracesets SET created_at = ? WHERE id = ?",
                (shape.format(day=day), traceset_id),
            )
        foreign.add(traceset_id)
    for limit in (1, 2, 3):
        items = list_all(world.clients["admin"], {"sort": sort}, limit=limit)
        ids = [item["id"] for item in items]
        assert len(ids) == len(set(ids)) == len(ours | foreign), (sort, limit)
        assert set(ids) == ours | foreign


def test_a_cursor_of_the_instants_text_pages_as_a_cursor_of_the_stored_text(
    world: World, clock: FakeClock
) -> None:
    """Cursors made before the stored text was kept (the instant's ISO text, as on
    PostgreSQL) still page to the same next page."""
    for i in range(6):
        add(world, name=f"n{i % 2}")
        clock.advance(microseconds=i % 2)
    client = world.clients["admin"]
    for sort in ("created:desc", "name:asc,created:asc"):
        page = client.get(LIST, params={"sort": sort, "limit": 2}).json()
        cursor = page["pagination"]["nextCursor"]
        body = cursor.partition(".")[0]
        payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        values = [
            db.timestamp_value(v["s"]).isoformat() if isinstance(v, dict) else v
            for v in payload["k"]
        ]
        if world.services.db.dialect == "sqlite":
            assert values != payload["k"]  # the stored text was in it
        older = encode_cursor(world.services.signer.key, payload["b"], values)
        params = {"sort": sort, "limit": 2}
        assert (
            client.get(LIST, params={**params, "next": older}).json()["items"]
            == client.get(LIST, params={**params, "next": cursor}).json()["items"]
        )
