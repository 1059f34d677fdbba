"""Libraries: identical uploads share one, reference counts stay true through delete, purge
and promotion, and nobody learns of a library only others can see."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.tenancy import RANKS_256, person, send_parts, start_upload
from tracestore.server import lifecycle
from tracestore.server.services import Services

LIBRARIES = "/api/v1/libraries"


def uploaded(http: httpx.Client, data: bytes, name: str = "t", **kw: Any) -> dict[str, Any]:
    files = {"rank_0.json": data}
    answer = start_upload(http, RANKS_256, files=files, name=name, **kw)
    body = {"uploadId": answer["uploadId"], "files": send_parts(http, answer, files)}
    done = http.post("/api/v1/tracesets/upload-url/complete", json=body, headers=kw.get("headers"))
    assert done.status_code == 201, done.text
    return dict(done.json())


def listed(http: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    response = http.get(LIBRARIES, params=params)
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


def library_of(traceset: dict[str, Any]) -> str:
    return "lib_" + str(traceset["hash"]).removeprefix("sha256:")[:32]


def test_identical_uploads_share_one_library(http: TestClient) -> None:
    first = uploaded(http, b'{"traceEvents": [1]}', "first")
    second = uploaded(http, b'{"traceEvents": [1]}', "second")
    other = uploaded(http, b'{"traceEvents": [2]}', "other")

    items = {item["id"]: item for item in listed(http)}

    assert set(items) == {library_of(first), library_of(other)}
    shared = items[library_of(first)]
    assert shared["reference_count"] == 2 and shared["total_size"] == 20
    assert shared["layout"] == "cas" and shared["scope"] == "workspace"
    assert shared["hash_short"] == first["hash"].removeprefix("sha256:")[:12]
    assert shared["storage_url"].startswith("file://")
    detail = http.get(f"{LIBRARIES}/{library_of(first)}").json()
    assert {t["id"] for t in detail["tracesets"]} == {first["id"], second["id"]}
    assert detail["files"] == [
        {"name": "rank_0.json", "size": 20, "hash": first["files"][0]["hash"]}
    ]


def test_reference_counts_follow_delete_and_purge(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    first = uploaded(http, b'{"traceEvents": [1]}', "first")
    second = uploaded(http, b'{"traceEvents": [1]}', "second")
    library = library_of(first)

    assert http.delete(f"/api/v1/tracesets/{first['id']}").status_code == 204
    assert http.get(f"{LIBRARIES}/{library}").json()["reference_count"] == 1

    assert http.delete(f"/api/v1/tracesets/{second['id']}").status_code == 204
    assert listed(http) == []
    assert http.get(f"{LIBRARIES}/{library}").status_code == 404
    clock.advance(days=30)
    lifecycle.sweep(services)
    assert listed(http) == []


def test_promotion_widens_the_scope_and_keeps_the_count(http: TestClient) -> None:
    first = uploaded(http, b'{"traceEvents": [1]}', "first")
    uploaded(http, b'{"traceEvents": [1]}', "second")
    assert http.post(f"/api/v1/tracesets/{first['id']}/promote").status_code == 200

    (item,) = listed(http)

    assert item["scope"] == "tenant" and item["reference_count"] == 2
    assert listed(http, scope="tenant") == [item] and listed(http, scope="workspace") == []


def test_nobody_learns_of_a_library_only_others_can_see(
    http: TestClient, services: Services
) -> None:
    stranger = person(services, "stranger", "elsewhere", ["theirs"])
    mine = uploaded(http, b'{"traceEvents": [1]}', "mine")
    theirs = uploaded(http, b'{"traceEvents": [1]}', "theirs", headers=stranger.auth)
    only_theirs = uploaded(http, b'{"traceEvents": [9]}', "secret", headers=stranger.auth)

    (item,) = listed(http)
    assert item["id"] == library_of(mine) and item["reference_count"] == 1
    detail = http.get(f"{LIBRARIES}/{library_of(mine)}").json()
    assert [t["id"] for t in detail["tracesets"]] == [mine["id"]]
    assert theirs["id"] not in str(detail)
    hidden = library_of(only_theirs)
    response = http.get(f"{LIBRARIES}/{hidden}")
    assert assert_error(response, 404, "NOT_FOUND")["message"] == f"Library '{hidden}' not found"
    assert http.get(f"{LIBRARIES}/{hidden[4:14]}").status_code == 404
    assert listed(http, search=hidden[4:14]) == []


def test_a_hash_prefix_finds_a_library(http: TestClient) -> None:
    made = uploaded(http, b'{"traceEvents": [1]}')
    hex_hash = made["hash"].removeprefix("sha256:")

    for reference in (hex_hash[:8], hex_hash[:20].upper(), library_of(made)):
        found = http.get(f"{LIBRARIES}/{reference}")
        assert found.status_code == 200, reference
        assert found.json()["hash"] == made["hash"]

    short = http.get(f"{LIBRARIES}/a1b2")
    assert assert_error(short, 400, "VALIDATION_ERROR")["message"] == (
        "Hash prefix 'a1b2' is too short. Minimum 8 characters required."
    )
    missing = http.get(f"{LIBRARIES}/lib_notfound")
    assert assert_error(missing, 404, "NOT_FOUND")["message"] == "Library 'lib_notfound' not found"


def test_several_libraries_under_one_prefix_answer_300_naming_them(
    http: TestClient, services: Services
) -> None:
    from sqlalchemy import update

    from tracestore.server import db

    first = uploaded(http, b'{"traceEvents": [1]}', "first")
    second = uploaded(http, b'{"traceEvents": [2]}', "second")
    # Two content hashes that share 8 hex digits would take ~4 billion uploads to meet by
    # chance; the stored hashes are made to share a prefix instead.
    with services.db.session() as session:
        for traceset, tail in ((first, "1"), (second, "2")):
            session.execute(
                update(db.Traceset)
                .where(db.Traceset.id == traceset["id"])
                .values(hash="sha256:" + "ab" * 8 + tail * 48)
            )

    response = http.get(f"{LIBRARIES}/abababab")

    error = assert_error(response, 300, "MULTIPLE_CHOICES")
    assert "lib_" + "ab" * 8 + "1" * 16 in error["message"]
    assert "lib_" + "ab" * 8 + "2" * 16 in error["message"]


def test_sort_search_paging_and_bad_parameters(http: TestClient, clock: FakeClock) -> None:
    small = uploaded(http, b"{}", "small-one")
    clock.advance(minutes=1)
    big = uploaded(http, b'{"traceEvents": [1, 2, 3, 4]}', "big-one")
    clock.advance(minutes=1)
    uploaded(http, b'{"traceEvents": [1, 2, 3, 4]}', "big-two")

    assert [i["id"] for i in listed(http)] == [library_of(big), library_of(small)]
    by_size = listed(http, sort="total_size:asc")
    assert [i["id"] for i in by_size] == [library_of(small), library_of(big)]
    by_count = listed(http, sort="reference_count:desc")
    assert by_count[0]["reference_count"] == 2
    assert [i["id"] for i in listed(http, search="small")] == [library_of(small)]
    assert [i["id"] for i in listed(http, search=big["hash"][7:17])] == [library_of(big)]

    page = http.get(LIBRARIES, params={"limit": 1}).json()
    assert page["pagination"]["hasMore"] is True
    rest = http.get(LIBRARIES, params={"limit": 1, "next": page["pagination"]["nextCursor"]})
    assert [i["id"] for i in rest.json()["items"]] == [library_of(small)]
    assert rest.json()["pagination"]["hasMore"] is False

    bad = http.get(LIBRARIES, params={"sort": "unknown"})
    assert assert_error(bad, 400, "VALIDATION_ERROR")["message"] == (
        "Invalid sort field: 'unknown'. Valid fields: created, total_size, reference_count"
    )
    for params in ({"limit": "0"}, {"next": "forged"}, {"bogus": "1"}, {"scope": "world"}):
        assert http.get(LIBRARIES, params=params).status_code == 400, params
    assert http.get(LIBRARIES, params={"workspaceId": "ws_other"}).status_code == 403


def test_the_client_reads_libraries(http: TestClient, admin_token: str) -> None:
    from tracestore.client import Client
    from tracestore.errors import ValidationError

    made = uploaded(http, b'{"traceEvents": [1]}')
    client = Client("http://testserver", token=admin_token, http=http)

    (item,) = client.list_libraries(sort="total_size:desc", limit=5).items
    assert item.id == library_of(made)
    assert client.get_library(item.hash_short).tracesets[0].id == made["id"]
    with pytest.raises(ValidationError, match="too short"):
        client.get_library("a1b2")
