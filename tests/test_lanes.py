"""The hot requests' lanes (``lanes.Lanes``): every request a lane takes is answered as
FastAPI's route answers it, status, headers and body (but the request id); requests no
lane should take (other methods, other shapes of path) still reach the router. The part
PUT's lane has tests/test_part_lane.py."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from tests.support.laning import comparable, gone_mid_body, presigned_path, taken_by
from tests.support.tenancy import person
from tests.support.uploading import UPLOAD_URL, request_upload, upload
from tracestore.server import receiving, tracesets
from tracestore.server.app import create_app
from tracestore.server.routes import web
from tracestore.server.services import Services
from tracestore.server.serving import lanes


def _requests(services: Services, admin_token: str, http: TestClient) -> list[Any]:
    """(path, headers) of the lanes' requests: found and not, visible and not, every shape
    of Authorization header, list queries good and bad."""
    mine = upload(
        http, {"rank_0.json": (b'{"traceEvents": []}', "primary")}, {"shape": {"rankCount": 1}}
    )
    outsider = person(services, "outsider", "elsewhere", ["theirs"])
    admin = {"Authorization": f"Bearer {admin_token}"}
    paths = [
        f"/api/v1/tracesets/{mine['id']}",
        "/api/v1/tracesets/ts_nosuch",
        "/api/v1/tracesets/upload-url",
        "/api/v1/tracesets/%20ts",
        f"/api/v1/tracesets/{mine['id']}?ignored=1",
        "/api/v1/tracesets",
        "/api/v1/tracesets?limit=1",
        "/api/v1/tracesets?limit=0",
        "/api/v1/tracesets?limit=1&limit=2",
        "/api/v1/tracesets?a=1&sort=name:desc",
        "/api/v1/tracesets?status=nosuch",
        "/api/v1/tracesets?workspaceId=ws_notmine",
        "/api/v1/tracesets?next=garbage",
        "/api/v1/tracesets?search=%C3%A9t%C3%A9",
    ]
    headers: list[dict[str, str]] = [
        admin,
        outsider.auth,
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer    "},
        {"Authorization": "bearer " + admin_token},
        {"Authorization": "Basic " + admin_token},
        {"Authorization": "Bearer tst_nosuchtoken"},
        {"Authorization": f"Bearer  {admin_token}  "},
    ]
    return [(path, header) for path in paths for header in headers]


@pytest.mark.slow
def test_a_lane_answers_what_its_route_answers(
    services: Services, admin_token: str, http: TestClient, both: tuple[TestClient, TestClient]
) -> None:
    laned, routed = both
    requests = _requests(services, admin_token, http)
    statuses = set()
    for path, headers in requests:
        ours, theirs = laned.get(path, headers=headers), routed.get(path, headers=headers)
        assert comparable(ours) == comparable(theirs), (path, headers)
        statuses.add(ours.status_code)
    assert statuses == {200, 400, 401, 403, 404}


def test_a_lanes_unexpected_error_is_the_routes_500(
    monkeypatch: pytest.MonkeyPatch,
    admin_token: str,
    both: tuple[TestClient, TestClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*_: Any) -> str:
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(tracesets, "get_traceset", broken)
    laned, routed = both
    headers = {"Authorization": f"Bearer {admin_token}"}
    ours = laned.get("/api/v1/tracesets/ts_any", headers=headers)
    theirs = routed.get("/api/v1/tracesets/ts_any", headers=headers)
    assert ours.status_code == 500
    assert comparable(ours) == comparable(theirs)
    logged = [r for r in caplog.records if r.getMessage().startswith("unexpected error")]
    assert len(logged) == 2 and all(r.exc_info for r in logged)


@pytest.mark.parametrize(
    "error",
    [
        StarletteHTTPException(418, "a teapot"),
        StarletteHTTPException(404),
        RequestValidationError(
            [{"type": "missing", "loc": ("query", "x"), "msg": "Field required"}]
        ),
        ClientDisconnect(),
    ],
    ids=["418", "404", "invalid", "gone"],
)
def test_a_lanes_error_is_answered_by_the_apps_handler_as_the_routes(
    error: Exception,
    monkeypatch: pytest.MonkeyPatch,
    admin_token: str,
    http: TestClient,
    both: tuple[TestClient, TestClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No lane raises these today; one that did must still answer as its route, through
    the app's handler of the error, not as an unexpected error (a 500)."""

    def broken(*_: Any) -> Any:
        raise error

    answer = request_upload(http, {"a.bin": (b"0123456789", "supporting")}).json()
    part = presigned_path(answer["files"][0]["parts"][0]["url"])
    monkeypatch.setattr(tracesets, "get_traceset", broken)
    monkeypatch.setattr(receiving, "open_part", broken)
    laned, routed = both
    headers = {"Authorization": f"Bearer {admin_token}"}
    for method, path in (("GET", "/api/v1/tracesets/ts_any"), ("PUT", part)):
        ours, theirs = (
            client.request(method, path, headers=headers, content=b"0123456789")
            for client in (laned, routed)
        )
        assert ours.status_code < 500 or isinstance(error, StarletteHTTPException)
        assert comparable(ours) == comparable(theirs), (method, path)
    assert not [r for r in caplog.records if r.getMessage().startswith("unexpected error")]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("HEAD", "/api/v1/tracesets"),
        ("DELETE", "/api/v1/tracesets/ts_nosuch"),
        ("GET", "/api/v1/tracesets/"),
        ("GET", "/api/v1/tracesets/ts_x/"),
        ("GET", "/api/v1/tracesets/ts_x/download"),
        ("GET", "/api/v1/tracesetsX"),
    ],
)
def test_what_no_lane_takes_goes_to_the_router(
    method: str, path: str, admin_token: str, both: tuple[TestClient, TestClient]
) -> None:
    laned, routed = both
    headers = {"Authorization": f"Bearer {admin_token}"}
    ours = laned.request(method, path, headers=headers, follow_redirects=False)
    theirs = routed.request(method, path, headers=headers, follow_redirects=False)
    assert comparable(ours) == comparable(theirs)


def test_each_lane_takes_its_routes_paths_and_no_other_routes(services: Services) -> None:
    """A lane is declared by its route (``app._lanes``): it takes that route's method and
    path, and no path of another route (the router would have sent it there). The web
    page's routes, the only ones the document leaves out, are checked too."""
    app = create_app(services=services)
    table: lanes.Lanes = app.state.lanes
    assert sorted(table.routes) == [
        ("GET", "/api/v1/tracesets"),
        ("GET", "/api/v1/tracesets/{traceset_id}"),
        ("POST", "/api/v1/tracesets/upload-url"),
        ("PUT", "/blobs/parts/{upload_id}/{position}/{part_number}"),
    ]
    routes = [
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    ]
    page: list[Any] = web.router.routes
    routes += [(method, route.path) for route in page for method in route.methods]
    for method, path in routes:
        # Each parameter as one segment, as the router matches {name}.
        taken = table.match(method, re.sub(r"\{[^}]+\}", "x", path)) is not None
        assert taken == ((method, path) in table.routes), (method, path)
    assert len(routes) > 20 and set(table.routes) <= set(routes)
    assert create_app(services=services, with_lanes=False).state.lanes.routes == []


_IDS = re.compile(r"\b(ts|upload)_[0-9A-Za-z]{27}\b|signature=[0-9A-Za-z_-]+")


def _upload_bodies(outsider_workspace: str) -> list[bytes | Iterator[bytes]]:
    files = [{"name": f"rank_{i}.json", "size": 10, "role": "primary"} for i in range(2)]
    good = {"name": "laned", "files": files, "workloadMetadata": {"shape": {"rankCount": 2}}}
    return [
        json.dumps(good).encode(),
        json.dumps({**good, "workloadMetadata": {"shape": {"rankCount": 3}}}).encode(),
        json.dumps({**good, "workspaceId": outsider_workspace}).encode(),
        json.dumps({**good, "files": []}).encode(),
        b'{"name": "laned", "files": [',
        b"[]",
        b"",
        b"\xff\xfe",
        json.dumps({**good, "name": "x" * 40_000}).encode(),
        # No Content-Length (chunked): the limit is met while reading.
        iter([b'{"name": "', b"x" * 40_000, b'"}']),
    ]


@pytest.fixture
def small_bodies(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSON body limit a test can pass without 16 MiB bodies (read by create_app)."""
    monkeypatch.setattr(services.settings, "max_json_body", 32 * 1024)


def test_the_upload_url_lane_answers_what_its_route_answers(
    small_bodies: None,
    services: Services,
    admin_token: str,
    both: tuple[TestClient, TestClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    laned, routed = both
    taken = taken_by(monkeypatch, "_upload_url")
    outsider = person(services, "outsider", "elsewhere", ["theirs"])
    theirs_ws = outsider.workspace_ids[0]
    headers: list[dict[str, str]] = [
        {"Authorization": f"Bearer {admin_token}"},
        outsider.auth,
        {},
        {"Authorization": "Bearer tst_nosuchtoken"},
    ]
    statuses = set()
    for index, body in enumerate(_upload_bodies(theirs_ws)):
        for header in headers:
            answers = []
            for client in (laned, routed):
                content = (
                    body if isinstance(body, bytes) else iter(_upload_bodies(theirs_ws)[index])
                )
                answers.append(
                    client.post(
                        UPLOAD_URL,
                        content=content,
                        headers={**header, "Content-Type": "application/json"},
                    )
                )
            ours, theirs = (comparable(answer) for answer in answers)
            assert (ours[0], ours[1], _IDS.sub("X", ours[2])) == (
                theirs[0],
                theirs[1],
                _IDS.sub("X", theirs[2]),
            ), (index, header)
            statuses.add(answers[0].status_code)
    assert statuses == {200, 400, 401, 403, 413}
    # Every laned request but the 413s of a declared length (RequestContext's, before any
    # lane) went through the lane.
    assert len(taken) == (len(_upload_bodies(theirs_ws)) - 1) * len(headers)


def test_the_lanes_answer_a_client_gone_mid_body_as_their_routes(
    services: Services, admin_token: str, http: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    answer = request_upload(http, {"a.bin": (b"0123456789", "supporting")}).json()
    requests = [
        ("POST", UPLOAD_URL, [(b"authorization", f"Bearer {admin_token}".encode())]),
        (
            "PUT",
            presigned_path(answer["files"][0]["parts"][0]["url"]),
            [(b"content-length", b"10")],
        ),
    ]
    caplog.set_level(logging.INFO, "tracestore")
    for method, path, headers in requests:
        caplog.clear()
        answers = [
            asyncio.run(
                gone_mid_body(create_app(services=services, with_lanes=flag), method, path, headers)
            )
            for flag in (True, False)
        ]
        assert answers[0] == answers[1]
        assert answers[0][0] == 400 and lanes.GONE_MID_BODY.encode() in answers[0][1]
        gone = [r for r in caplog.records if "went away mid-body" in r.getMessage()]
        assert len(gone) == 2
