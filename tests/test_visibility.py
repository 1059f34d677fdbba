"""Who sees what (docs/api.md): three users, two tenants, three workspaces, every scope, every
traceset route, each cell an exact status; once with API tokens, once with JWT access tokens.

- owner: tenant acme, workspace ml, tenant admin; uploads the traceset into ml
- colleague: tenant acme, workspace infra
- stranger: tenant globex, workspace research

A traceset one may not see answers 404 exactly as one that does not exist; writing (delete,
promote, resume, complete) needs membership of its workspace, and a caller who may see but
not write gets 404 too. Naming a workspace one is not a member of answers 403. Editing
(PATCH) is the uploader's or a tenant admin's: one who may see but not edit gets 403.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.envelopes import assert_error
from tests.support.idp import token, with_jwt_login
from tests.support.tenancy import (
    RANKS_256,
    UPLOAD_URL,
    Person,
    person,
    tenant_id,
    upload_ready,
    workspace_id,
)
from tracestore.server.services import Services
from tracestore.server.settings import Settings

SCOPES = ("workspace", "tenant", "public")
PEOPLE = ("owner", "colleague", "stranger")
NEXT = {"workspace": "tenant", "tenant": "public", "public": "public"}

# route → scope → statuses for (owner, colleague, stranger). "listed"/"unlisted": 200 from
# the list route, with the traceset among the items or not.
READ = {"workspace": (200, 404, 404), "tenant": (200, 200, 404), "public": (200, 200, 200)}
WRITE = dict.fromkeys(SCOPES, (200, 404, 404))
EXPECTED: dict[str, dict[str, tuple[Any, ...]]] = {
    "GET traceset": READ,
    "GET download": READ,
    "GET resolve": READ,
    "POST validate": READ,
    "GET list": {
        "workspace": ("listed", "unlisted", "unlisted"),
        "tenant": ("listed", "listed", "unlisted"),
        "public": ("listed", "listed", "listed"),
    },
    "GET resume upload": WRITE,
    "POST complete (retry)": WRITE,
    "POST promote": WRITE,
    "DELETE traceset": dict.fromkeys(SCOPES, (204, 404, 404)),
    "PATCH traceset": {
        "workspace": (200, 404, 404),
        "tenant": (200, 403, 404),
        "public": (200, 403, 403),
    },
}
# Routes that change the traceset when they succeed: the owner's cells run them last.
MUTATING = ("PATCH traceset", "POST promote", "DELETE traceset")

Call = Callable[[TestClient, dict[str, Any], dict[str, str]], Any]


def _list(http: TestClient, ts: dict[str, Any], auth: dict[str, str]) -> Any:
    answer = http.get("/api/v1/tracesets", params={"limit": 100}, headers=auth)
    if answer.status_code != 200:
        return answer.status_code
    ids = {item["id"] for item in answer.json()["items"]}
    return "listed" if ts["id"] in ids else "unlisted"


CALLS: dict[str, Call] = {
    "GET traceset": lambda http, ts, auth: (
        http.get(f"/api/v1/tracesets/{ts['id']}", headers=auth).status_code
    ),
    "GET download": lambda http, ts, auth: (
        http.get(
            f"/api/v1/tracesets/{ts['id']}/download", params={"file": "rank_0.json"}, headers=auth
        ).status_code
    ),
    "GET resolve": lambda http, ts, auth: (
        http.get(f"/api/v1/tracesets/{ts['id']}/resolve", headers=auth).status_code
    ),
    "POST validate": lambda http, ts, auth: (
        http.post(f"/api/v1/tracesets/{ts['id']}/validate", headers=auth).status_code
    ),
    "GET list": _list,
    "GET resume upload": lambda http, ts, auth: (
        http.get(f"{UPLOAD_URL}/{ts['uploadId']}", headers=auth).status_code
    ),
    "POST complete (retry)": lambda http, ts, auth: (
        http.post(f"{UPLOAD_URL}/complete", json=ts["completeBody"], headers=auth).status_code
    ),
    "POST promote": lambda http, ts, auth: (
        http.post(
            f"/api/v1/tracesets/{ts['id']}/promote",
            json={"target": NEXT[ts["scope"]]},
            headers=auth,
        ).status_code
    ),
    "DELETE traceset": lambda http, ts, auth: (
        http.delete(f"/api/v1/tracesets/{ts['id']}", headers=auth).status_code
    ),
    "PATCH traceset": lambda http, ts, auth: (
        http.patch(
            f"/api/v1/tracesets/{ts['id']}", json={"addTags": ["seen"]}, headers=auth
        ).status_code
    ),
}


@pytest.fixture
def settings(settings: Settings, tmp_path: Path) -> Settings:
    return with_jwt_login(settings, tmp_path / "jwks.json")


def jwt_person(
    services: Services, name: str, tenant: str, workspaces: list[str], *, admin: bool = False
) -> Person:
    """A user of the identity provider, created by the service on first use of its token."""
    tid = tenant_id(services, tenant)
    wids = tuple(workspace_id(services, tid, w) for w in workspaces)
    signed = token(
        sub=f"{name}@idp", name=name, tenant=tenant, workspaces=workspaces, tenant_admin=admin
    )
    return Person("(just in time)", tid, wids, signed)


@pytest.fixture(params=["api token", "jwt"])
def people(services: Services, request: pytest.FixtureRequest) -> dict[str, Person]:
    """The three users, holding API tokens or JWT access tokens."""
    make = person if request.param == "api token" else jwt_person
    return {
        "owner": make(services, "owner", "acme", ["ml"], admin=True),
        "colleague": make(services, "colleague", "acme", ["infra"]),
        "stranger": make(services, "stranger", "globex", ["research"]),
    }


def traceset_at(http: TestClient, owner: Person, scope: str) -> dict[str, Any]:
    """A ready traceset in the owner's workspace, promoted (by the owner) to ``scope``."""
    ts = upload_ready(http, RANKS_256, headers=owner.auth)
    steps = {"workspace": [], "tenant": ["tenant"], "public": ["tenant", "public"]}[scope]
    for target in steps:
        promoted = http.post(
            f"/api/v1/tracesets/{ts['id']}/promote", json={"target": target}, headers=owner.auth
        )
        assert promoted.status_code == 200, promoted.text
    return {**ts, "scope": scope}


@pytest.mark.parametrize("scope", SCOPES)
def test_visibility_matrix(http: TestClient, people: dict[str, Person], scope: str) -> None:
    ts = traceset_at(http, people["owner"], scope)
    before = http.get(f"/api/v1/tracesets/{ts['id']}", headers=people["owner"].auth).json()
    actual: dict[tuple[str, str], Any] = {}
    # Those who may not write go first: none of their calls may change anything.
    for who in ("colleague", "stranger", "owner"):
        order = [r for r in CALLS if who != "owner" or r not in MUTATING]
        if who == "owner":
            after = http.get(f"/api/v1/tracesets/{ts['id']}", headers=people["owner"].auth)
            assert after.json() == before
            order += list(MUTATING)
        for route in order:
            actual[(route, who)] = CALLS[route](http, ts, people[who].auth)

    expected = {
        (route, who): EXPECTED[route][scope][PEOPLE.index(who)] for route in CALLS for who in PEOPLE
    }
    assert actual == expected


def test_unknown_traceset_answers_like_an_invisible_one(
    http: TestClient, people: dict[str, Person]
) -> None:
    ts = traceset_at(http, people["owner"], "workspace")
    stranger = people["stranger"].auth

    hidden = http.get(f"/api/v1/tracesets/{ts['id']}", headers=stranger)
    missing = http.get("/api/v1/tracesets/ts_0000000000000000000000000000", headers=stranger)

    assert assert_error(hidden, 404, "NOT_FOUND")["message"] == f"Traceset '{ts['id']}' not found"
    assert assert_error(missing, 404, "NOT_FOUND")["message"] == (
        "Traceset 'ts_0000000000000000000000000000' not found"
    )


@pytest.mark.parametrize("who", ["colleague", "stranger"])
def test_naming_a_workspace_one_is_not_a_member_of_is_403(
    http: TestClient, people: dict[str, Person], who: str
) -> None:
    ml = people["owner"].workspace_ids[0]
    auth = people[who].auth
    body = {
        "name": "x",
        "workspaceId": ml,
        "files": [{"name": "a", "size": 1, "role": "supporting"}],
    }

    upload = http.post(UPLOAD_URL, json=body, headers=auth)
    listing = http.get("/api/v1/tracesets", params={"workspaceId": ml}, headers=auth)

    for answer in (upload, listing):
        assert assert_error(answer, 403, "FORBIDDEN")["message"] == (
            "You do not have access to this resource"
        )
