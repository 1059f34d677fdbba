"""Who uploaded a traceset and who edited it (``createdBy``, ``editedBy``), ``PATCH`` of its
name, description and tags, and the list's ``uploadedBy`` and ``tag`` filters (docs/api.md),
on the service's engine; the migration that brought them (0010), down and up again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.support.clock import FakeClock
from tests.support.tenancy import RANKS_256, Person, person, upload_ready
from tracestore.server import db, tracesets
from tracestore.server.services import Services

LIST = "/api/v1/tracesets"


def _url(traceset: dict[str, Any]) -> str:
    return f"{LIST}/{traceset['id']}"


@pytest.fixture
def team(services: Services) -> dict[str, Person]:
    """Two members of one workspace, a tenant admin of another, and a stranger."""
    return {
        "alice": person(services, "alice@acme.test", "acme", ["ml"]),
        "bob": person(services, "bob@acme.test", "acme", ["ml"]),
        "admin": person(services, "root@acme.test", "acme", ["infra"], admin=True),
        "eve": person(services, "eve@globex.test", "globex", ["research"]),
    }


def _upload(http: TestClient, who: Person, **extra: Any) -> dict[str, Any]:
    return upload_ready(http, RANKS_256, headers=who.auth, **extra)


def _ids(http: TestClient, who: Person, params: Any) -> list[str]:
    answer = http.get(LIST, params=params, headers=who.auth)
    assert answer.status_code == 200, answer.text
    return [item["id"] for item in answer.json()["items"]]


def test_every_traceset_answer_names_its_uploader(
    http: TestClient, team: dict[str, Person]
) -> None:
    alice = team["alice"]
    done = _upload(http, alice, name="alice's run")
    uploader = {"id": alice.user_id, "name": "alice@acme.test"}
    assert done["createdBy"] == uploader  # the completion's answer
    got = http.get(_url(done), headers=team["bob"].auth).json()
    assert (got["createdBy"], got["editedAt"], got["editedBy"]) == (uploader, None, None)
    items = http.get(LIST, headers=team["bob"].auth).json()["items"]
    assert [item["createdBy"] for item in items] == [uploader]


def test_the_uploader_edits_name_description_and_tags_and_the_edit_is_recorded(
    http: TestClient, team: dict[str, Person], services: Services
) -> None:
    alice = team["alice"]
    done = _upload(http, alice, description="old", tags=["a", "b"])
    answer = http.patch(
        _url(done), json={"name": "new name", "tags": ["c", "c", "d"]}, headers=alice.auth
    )
    assert answer.status_code == 200, answer.text
    edited = answer.json()
    assert (edited["name"], edited["description"], edited["tags"]) == (
        "new name",
        "old",
        ["c", "d"],
    )
    assert edited["editedBy"] == {"id": alice.user_id, "name": "alice@acme.test"}
    assert edited["editedAt"] == edited["updatedAt"] is not None
    assert http.get(_url(done), headers=alice.auth).json() == edited
    # null removes the description; addTags/removeTags change the tags held.
    again = http.patch(
        _url(done),
        json={"description": None, "addTags": ["e", "c"], "removeTags": ["d"]},
        headers=alice.auth,
    ).json()
    assert (again["name"], again["description"], again["tags"]) == ("new name", None, ["c", "e"])
    with services.db.session(write=False) as session:
        rows = session.scalars(
            select(db.TracesetTag.tag).where(db.TracesetTag.traceset_id == done["id"])
        )
        assert sorted(rows) == ["c", "e"]


def test_who_may_edit(http: TestClient, team: dict[str, Person]) -> None:
    done = _upload(http, team["alice"], tags=["x"])
    assert done["canEdit"] is True  # the completion's answer, to its uploader
    assert http.get(_url(done), headers=team["bob"].auth).json()["canEdit"] is False
    body = {"name": "theirs"}
    # A member of the workspace who did not upload it sees it but may not edit it: 403.
    refused = http.patch(_url(done), json=body, headers=team["bob"].auth)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "FORBIDDEN"
    assert "alice@acme.test" in refused.json()["error"]["message"]
    # Another tenant's user cannot see it: 404, as for GET.
    hidden = http.patch(_url(done), json=body, headers=team["eve"].auth)
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "NOT_FOUND"
    assert http.get(_url(done), headers=team["eve"].auth).status_code == 404
    # The tenant admin, not a member of its workspace, sees it once promoted, and edits it.
    assert http.patch(_url(done), json=body, headers=team["admin"].auth).status_code == 404
    promoted = http.post(f"{_url(done)}/promote", json={}, headers=team["alice"].auth)
    assert promoted.status_code == 200, promoted.text
    assert http.get(_url(done), headers=team["admin"].auth).json()["canEdit"] is True
    by_admin = http.patch(_url(done), json=body, headers=team["admin"].auth)
    assert by_admin.status_code == 200, by_admin.text
    assert by_admin.json()["editedBy"]["id"] == team["admin"].user_id
    assert by_admin.json()["createdBy"]["id"] == team["alice"].user_id
    assert http.get(_url(done), headers=team["alice"].auth).json()["name"] == "theirs"
    # Nothing a refused edit sent was kept.
    assert http.get(_url(done), headers=team["bob"].auth).json()["tags"] == ["x"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("{}", "Nothing to change"),
        ('{"nmae": "x"}', "Nothing to change"),
        ("", "Nothing to change"),
        ("[]", "JSON object"),
        ('{"name": null}', "name"),
        ('{"tags": null}', "tags"),
        ('{"addTags": null}', "addTags"),
        ('{"name": ""}', "name"),
        ('{"name": "' + "n" * 256 + '"}', "name"),
        ('{"name": 7}', "name"),
        ('{"description": "' + "d" * 4097 + '"}', "description"),
        ('{"tags": [""]}', "tags"),
        ('{"tags": ["' + "t" * 65 + '"]}', "tags"),
        ('{"tags": "a"}', "tags"),
        ('{"name": "a\\u0000b"}', "NUL"),
        ('{"tags": ["a"], "addTags": ["b"]}', "not both"),
        ('{"addTags": ["b"], "removeTags": ["b"]}', "both in addTags and in removeTags"),
        ('{"addTags": [' + ",".join(f'"t{i}"' for i in range(64)) + "]}", "at most 64 tags"),
    ],
)
def test_a_bad_edit_is_a_400_that_changes_nothing(
    http: TestClient, team: dict[str, Person], body: str, words: str
) -> None:
    alice = team["alice"]
    done = _upload(http, alice, tags=["kept"])
    answer = http.patch(
        _url(done),
        content=body.encode(),
        headers={**alice.auth, "Content-Type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "VALIDATION_ERROR"
    assert words in answer.json()["error"]["message"]
    after = http.get(_url(done), headers=alice.auth).json()
    assert (after["name"], after["tags"], after["editedAt"]) == ("promotion test", ["kept"], None)


def test_the_body_is_read_before_the_write_and_its_400_comes_after_the_404(
    http: TestClient, team: dict[str, Person], services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = team["alice"]
    done = _upload(http, alice, tags=["kept"])
    # A body is parsed outside the write transaction: on SQLite that holds the one writer.
    events: list[str] = []
    real_parse, real_session = tracesets.parse_edit_request, services.db.session

    def parse(body: bytes) -> Any:
        events.append("parse")
        return real_parse(body)

    @contextmanager
    def session(*, write: bool = True) -> Iterator[Any]:
        events.append("write" if write else "read")
        with real_session(write=write) as opened:
            yield opened

    monkeypatch.setattr(tracesets, "parse_edit_request", parse)
    monkeypatch.setattr(services.db, "session", session)
    answer = http.patch(_url(done), json={"name": "renamed"}, headers=alice.auth)
    assert answer.status_code == 200, answer.text
    assert events.index("parse") < events.index("write")
    # Still: who may not see it learns nothing from the body's refusal.
    bad = b'{"name": null}'
    for who, status in ((team["eve"], 404), (alice, 400)):
        answer = http.patch(
            _url(done), content=bad, headers={**who.auth, "Content-Type": "application/json"}
        )
        assert answer.status_code == status, answer.text


def test_a_deleted_traceset_is_not_edited(http: TestClient, team: dict[str, Person]) -> None:
    alice = team["alice"]
    done = _upload(http, alice)
    assert http.delete(_url(done), headers=alice.auth).status_code == 204
    answer = http.patch(_url(done), json={"name": "x"}, headers=alice.auth)
    assert answer.status_code == 409, answer.text
    assert "deleted" in answer.json()["error"]["message"]


def test_the_list_filters_by_uploader_and_by_every_tag_given(
    http: TestClient, team: dict[str, Person], clock: FakeClock
) -> None:
    alice, bob = team["alice"], team["bob"]
    a1 = _upload(http, alice, tags=["llama", "baseline"])
    clock.advance(seconds=1)  # newest first: a1, a2, b1 in that order
    a2 = _upload(http, alice, tags=["llama"])
    clock.advance(seconds=1)
    b1 = _upload(http, bob, tags=["llama", "baseline"])
    assert _ids(http, bob, {"uploadedBy": alice.user_id}) == [a2["id"], a1["id"]]
    assert _ids(http, bob, {"uploadedBy": "me"}) == [b1["id"]]
    assert _ids(http, alice, {"uploadedBy": "me"}) == [a2["id"], a1["id"]]
    assert _ids(http, alice, {"uploadedBy": team["eve"].user_id}) == []
    assert _ids(http, alice, [("tag", "llama")]) == [b1["id"], a2["id"], a1["id"]]
    assert _ids(http, alice, [("tag", "llama"), ("tag", "baseline")]) == [b1["id"], a1["id"]]
    assert _ids(http, alice, [("tag", "baseline"), ("uploadedBy", "me")]) == [a1["id"]]
    assert _ids(http, alice, [("tag", "Llama")]) == []  # exact
    # Another tenant's user finds none of them, whoever they name.
    assert _ids(http, team["eve"], {"uploadedBy": alice.user_id}) == []
    assert _ids(http, team["eve"], [("tag", "llama")]) == []
    # An edit moves the tag filter's answer with it.
    http.patch(_url(a1), json={"removeTags": ["baseline"]}, headers=alice.auth)
    assert _ids(http, alice, [("tag", "baseline")]) == [b1["id"]]
    # Pages by cursor keep the filters.
    first = http.get(LIST, params=[("tag", "llama"), ("limit", "2")], headers=alice.auth).json()
    rest = http.get(
        LIST,
        params=[("tag", "llama"), ("limit", "2"), ("next", first["pagination"]["nextCursor"])],
        headers=alice.auth,
    ).json()
    assert [i["id"] for i in first["items"] + rest["items"]] == [b1["id"], a2["id"], a1["id"]]
    # Promotion's tags are the filter's too.
    http.post(f"{_url(a2)}/promote", json={"tags": ["promoted"]}, headers=alice.auth)
    assert _ids(http, alice, [("tag", "promoted")]) == [a2["id"]]


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ([("uploadedBy", "")], "uploadedBy"),
        ([("uploadedBy", "u" * 65)], "uploadedBy"),
        ([("uploadedBy", "a"), ("uploadedBy", "b")], "more than once"),
        ([("tag", "")], "tag"),
        ([("tag", "t" * 65)], "tag"),
        ([("tag", f"t{i}") for i in range(9)], "At most 8 tag filters"),
    ],
)
def test_bad_list_filters_are_400s(
    http: TestClient, params: list[tuple[str, str]], words: str
) -> None:
    answer = http.get(LIST, params=params)
    assert answer.status_code == 400, answer.text
    assert words in answer.json()["error"]["message"]


def test_the_migration_keeps_the_tags_held_and_goes_down_and_up(
    http: TestClient, team: dict[str, Person], services: Services
) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import inspect

    from tracestore.server.db.database import MIGRATIONS_DIR

    alice = team["alice"]
    done = _upload(http, alice, tags=["kept", "also", "kept"])
    http.patch(_url(done), json={"name": "edited"}, headers=alice.auth)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with services.db.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0009")
        columns = {c["name"] for c in inspect(connection).get_columns("tracesets")}
        assert not {"edited_at", "edited_by"} & columns
        assert not inspect(connection).has_table("traceset_tags")
        command.upgrade(config, "head")
    # The tags every traceset held are searchable after the upgrade; the edit record is gone.
    assert _ids(http, alice, [("tag", "kept"), ("tag", "also")]) == [done["id"]]
    after = http.get(_url(done), headers=alice.auth).json()
    assert (after["name"], after["editedAt"], after["tags"]) == (
        "edited",
        None,
        ["kept", "also", "kept"],
    )
