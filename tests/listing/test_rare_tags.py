"""A page of a rare tag starts from the tag's rows (``rare_tags.RARE_TAG``): the same pages, in
the same order, through the same cursors, as the walk in the sort's order that checks the
tag per row (at a million tracesets, 226 ms a page on SQLite for a tag on one in 500)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert, text, update

from tests.support.world import LIST, World, add
from tracestore.server import db
from tracestore.server.listing import plan as listing_plan
from tracestore.server.listing import rare_tags

SORTS = [
    "created:desc",
    "created:asc",
    "name:asc,created:desc",
    "size:desc,rankCount:asc",
    "rankCount:desc,name:asc",
    "step_time:desc",
    "step_time:asc",
]
FILTERS: list[list[tuple[str, str]]] = [
    [("tag", "third")],
    [("tag", "even")],
    [("tag", "all"), ("tag", "third")],
    [("tag", "third"), ("tag", "even"), ("tag", "all")],
    [("tag", "rare")],
    [("tag", "third"), ("status", "ready")],
    [("tag", "even"), ("workload_family", "llama")],
    [("tag", "even"), ("scope", "workspace")],
    [("tag", "rare"), ("scope", "public")],
    [("tag", "nobody")],
]


def _tag(world: World, traceset_id: str, *tags: str) -> None:
    with world.services.db.session() as session:
        session.execute(
            insert(db.TracesetTag), [{"tag": tag, "traceset_id": traceset_id} for tag in tags]
        )


@pytest.fixture
def tagged(world: World, catalogue: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The catalogue's tracesets tagged ``all``, ``even`` (every other), ``third`` (every
    third), a few with step times; and ``rare`` on a public traceset of the other tenant
    (seen by everyone), a workspace traceset of theirs (by nobody here) and one of ours."""
    holders: dict[str, set[str]] = {"all": set(), "even": set(), "third": set(), "rare": set()}
    for index, record in enumerate(catalogue):
        tags = ["all"] + ["even"] * (index % 2 == 0) + ["third"] * (index % 3 == 0)
        _tag(world, record["id"], *tags)
        for tag in tags:
            holders[tag].add(record["id"])
        if index % 4 != 3:
            with world.services.db.session() as session:
                session.execute(
                    update(db.Traceset)
                    .where(db.Traceset.id == record["id"])
                    .values(median_step_time_us=float(1000 * (index % 5)))
                )
    public = add(world, world.wsb, scope="public", tenant=world.other_tenant)
    hidden = add(world, world.wsb, tenant=world.other_tenant)
    ours = catalogue[5]["id"]
    for traceset_id in (public, hidden, ours):
        _tag(world, traceset_id, "rare")
    holders["rare"] = {public, ours}  # as the admin sees it
    return holders


def _every_page(world: World, params: list[tuple[str, str]], limit: int = 2) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    for _ in range(100):
        query: list[tuple[str, str | int | float | bool | None]] = [*params, ("limit", limit)]
        if cursor:
            query.append(("next", cursor))
        response = world.clients["admin"].get(LIST, params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        ids.extend(item["id"] for item in page["items"])
        cursor = page["pagination"]["nextCursor"]
        if cursor is None:
            return ids
    raise AssertionError("too many pages")


@pytest.fixture
def driven_tags(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The tag each page was driven from (None: walked), as ``plan`` was told."""
    told: list[str | None] = []
    planned = listing_plan.plan

    def plan(*args: Any) -> Any:
        told.append(args[4] if len(args) > 4 else None)
        return planned(*args)

    monkeypatch.setattr(listing_plan, "plan", plan)
    return told


def _drive(monkeypatch: pytest.MonkeyPatch, always: bool) -> None:
    """Every tag drives its page, or none does."""
    monkeypatch.setattr(rare_tags, "drives", lambda count, size, fetch: always)


@pytest.mark.parametrize("sort", SORTS)
def test_a_rare_tags_pages_are_the_walks_pages(
    world: World,
    tagged: dict[str, set[str]],
    sort: str,
    monkeypatch: pytest.MonkeyPatch,
    driven_tags: list[str | None],
) -> None:
    for filters in FILTERS:
        params = [*filters, ("sort", sort)]
        _drive(monkeypatch, True)
        driven = _every_page(world, params)
        assert driven_tags and all(driven_tags), filters
        _drive(monkeypatch, False)
        driven_tags.clear()
        walked = _every_page(world, params)
        assert not any(driven_tags)
        driven_tags.clear()
        assert driven == walked, (filters, sort)
        assert len(set(driven)) == len(driven)
        wanted = set.intersection(*(tagged.get(v, set()) for k, v in filters if k == "tag"))
        if len(filters) == len([f for f in filters if f[0] == "tag"]):
            assert set(driven) == wanted, filters


@pytest.mark.parametrize(
    ("count", "size", "fetch", "drives"),
    [
        (1_913, 1_000_000, 21, True),  # bench/list.py's rare tag: 1,913 lookups, not 21,000 rows
        (3_000, 10_000, 21, False),  # a tag on every third of 10,000: found in ~63 rows walked
        (20, 10_000, 21, True),
        (458, 10_000, 21, True),  # 458² = 209,764 <= 21 × 10,000
        (459, 10_000, 21, False),
        (5_000, 10**9, 101, True),
        (5_001, 10**9, 101, False),  # never beyond RARE_TAG
        (5_000, -1, 21, True),  # a table PostgreSQL has not analysed yet: RARE_TAG bounds it
        (5_001, 0, 21, False),
    ],
)
def test_a_tag_drives_when_its_lookups_cost_less_than_the_walk(
    count: int, size: int, fetch: int, drives: bool
) -> None:
    assert rare_tags.drives(count, size, fetch) is drives


def test_the_size_a_tag_is_weighed_against_is_the_stores(
    world: World, tagged: dict[str, set[str]], driven_tags: list[str | None]
) -> None:
    # About 27 tracesets here: with a page of 3 rows fetched, a tag on up to 9 of them
    # drives (9² <= 3 × 27) and "even" (12 tracesets) walks; with 51, both drive.
    if world.services.db.dialect == "postgresql":  # its estimate: the planner's statistics
        with world.services.db.engine.connect() as connection:
            connection.execute(text("ANALYZE tracesets"))
            connection.commit()
    _every_page(world, [("tag", "even")], limit=2)
    _every_page(world, [("tag", "third")], limit=2)
    _every_page(world, [("tag", "even")], limit=50)
    assert driven_tags == [None] * 6 + ["third"] * 4 + ["even"]  # a plan a page


def test_the_rarest_tag_given_drives_and_common_ones_walk(
    world: World,
    tagged: dict[str, set[str]],
    monkeypatch: pytest.MonkeyPatch,
    driven_tags: list[str | None],
) -> None:
    monkeypatch.setattr(rare_tags, "RARE_TAG", 8)  # "third" (8 tracesets) and "rare" are rare
    _every_page(world, [("tag", "all"), ("tag", "even"), ("tag", "third")], limit=50)
    _every_page(world, [("tag", "all"), ("tag", "even")], limit=50)
    _every_page(world, [("tag", "even"), ("tag", "rare")], limit=50)
    _every_page(world, [("tag", "third"), ("tag", "rare")], limit=50)  # the rarest drives
    assert driven_tags == ["third", None, "rare", "rare"]


def test_a_cursor_pages_on_when_its_tag_stops_or_starts_being_rare(
    world: World, tagged: dict[str, set[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cursor holds the last item's sort values, whichever way its page was found.
    params = [("tag", "even"), ("sort", "name:asc,created:desc")]
    walked = _every_page(world, params, limit=50)
    client = world.clients["admin"]
    for first in (True, False):
        _drive(monkeypatch, first)
        page = client.get(LIST, params=[*params, ("limit", "5")]).json()
        _drive(monkeypatch, not first)
        cursor = page["pagination"]["nextCursor"]
        rest = client.get(LIST, params=[*params, ("limit", "50"), ("next", cursor)]).json()
        ids = [item["id"] for item in page["items"] + rest["items"]]
        assert ids == walked
