"""The OpenAPI description lists, per operation, exactly the statuses it answers: every
documented (operationId, status) has a driver here that makes the live app answer it, and
every driver's status is documented (so neither side can drift)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from tests.support.clock import FakeClock
from tests.support.comparison_traces import BASE, run
from tests.support.envelopes import assert_error
from tests.support.idp import AUDIENCE, ISSUER, token
from tests.support.tenancy import RANKS_256, person, send_parts, start_upload, upload_ready
from tests.support.uploading import upload
from tracestore.errors import ERRORS_BY_STATUS
from tracestore.server import db, presigned, receiving
from tracestore.server.app import create_app
from tracestore.server.services import Services, build_services
from tracestore.server.storage.local import LocalBlobStore

LIST = "/api/v1/tracesets"
UPLOAD = "/api/v1/tracesets/upload-url"
COMPLETE = "/api/v1/tracesets/upload-url/complete"
CHECK = "/api/v1/tracesets/upload-url/check"
CENSUS = "/api/v1/tracesets/upload-url/census"
ONE_HEAD = {
    "files": [{"name": "a", "size": 2, "head": "e30="}],
    "workloadMetadata": {"shape": {"rankCount": 1}},
}
BODY_LIMIT = 64 * 1024
FAR = int(time.time()) + 10 * 365 * 86400  # a signature's expiry that outlives the test
ONE_FILE = {"name": "x", "files": [{"name": "a", "size": 1, "role": "supporting"}]}
TOO_BIG = {"name": "x", "description": "d" * (BODY_LIMIT + 1)}


@dataclass
class Scene:
    http: httpx.Client  # the TestClient below
    services: Services
    clock: FakeClock
    monkeypatch: pytest.MonkeyPatch

    def ready(self, metadata: Any = RANKS_256, **extra: Any) -> dict[str, Any]:
        return upload_ready(self.http, metadata, **extra)

    def uploading(self) -> dict[str, Any]:
        return start_upload(self.http, RANKS_256)

    def failed(self) -> dict[str, Any]:
        """An upload session that failed (its traceset was deleted mid-upload)."""
        answer = self.uploading()
        assert self.http.delete(f"{LIST}/{answer['tracesetId']}").status_code == 204
        return answer

    def part_url(self, answer: dict[str, Any]) -> str:
        return str(answer["files"][0]["parts"][0]["url"])

    def signed_part(self, upload_id: str, size: int = 19) -> str:
        grant = presigned.PartGrant(upload_id, 0, 1, size, self.services.settings.part_size, FAR)
        return self.services.signer.part_path(grant)

    def download(self, traceset: dict[str, Any], file: str | None = None) -> str:
        params = {"file": file} if file else {}
        answer = self.http.get(f"{LIST}/{traceset['id']}/download", params=params)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["url"])

    def patch(self, target: object, name: str, value: object) -> None:
        self.monkeypatch.setattr(target, name, value)


@pytest.fixture
def scene(
    services: Services, admin_token: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Scene]:
    small = services.settings.model_copy(update={"max_json_body": BODY_LIMIT})
    limited = Services(
        settings=small, db=services.db, store=services.store, signer=services.signer, clock=clock
    )
    with TestClient(create_app(services=limited), raise_server_exceptions=False) as http:
        http.headers["Authorization"] = f"Bearer {admin_token}"
        yield Scene(http, limited, clock, monkeypatch)


def _bad_signature(url: str) -> str:
    return re.sub(r"signature=[^&]+", "signature=" + "0" * 64, url)


def _without(url: str, parameter: str) -> str:
    return re.sub(rf"[?&]{parameter}=[^&]+", "", url)


def _broken_clock() -> Any:
    raise RuntimeError("the clock broke")


def _broken(s: Scene, method: str, url: str) -> httpx.Response:
    """An unexpected error inside the route: every route reads the clock."""
    s.patch(s.services, "clock", _broken_clock)
    return s.http.request(method, url, content=b"x")


Driver = Callable[[Scene], httpx.Response]
# The statuses every authenticated API route answers, driven for each operation generically.
GENERIC = (401, 500, 503)
API_OPERATIONS: dict[str, tuple[str, str]] = {
    "list_tracesets": ("GET", LIST),
    "create_traceset": ("POST", LIST),
    "request_upload_urls": ("POST", UPLOAD),
    "complete_upload": ("POST", COMPLETE),
    "check_upload_url": ("POST", CHECK),
    "census_before_upload": ("POST", CENSUS),
    "resume_upload": ("GET", f"{UPLOAD}/up_x"),
    "get_traceset": ("GET", f"{LIST}/ts_x"),
    "delete_traceset": ("DELETE", f"{LIST}/ts_x"),
    "edit_traceset": ("PATCH", f"{LIST}/ts_x"),
    "get_analysis": ("GET", f"{LIST}/ts_x/analysis"),
    "compare_tracesets": ("GET", f"{LIST}/ts_x/compare?with=ts_y"),
    "promote_traceset": ("POST", f"{LIST}/ts_x/promote"),
    "download_traceset": ("GET", f"{LIST}/ts_x/download"),
    "resolve_traceset": ("GET", f"{LIST}/ts_x/resolve"),
    "validate_traceset": ("POST", f"{LIST}/ts_x/validate"),
    "list_libraries": ("GET", "/api/v1/libraries"),
    "get_library": ("GET", "/api/v1/libraries/lib_x"),
}
LIBRARIES = "/api/v1/libraries"


def _promote(s: Scene, traceset_id: str, body: Any = None, **kw: Any) -> httpx.Response:
    return s.http.post(f"{LIST}/{traceset_id}/promote", json=body, **kw)


def _put_part(s: Scene, extra: bytes = b"", cut: int = 0) -> httpx.Response:
    data = b'{"traceEvents": []}' + extra
    return s.http.put(s.part_url(s.uploading()), content=data[: len(data) - cut])


def _put_part_while_busy(s: Scene) -> httpx.Response:
    answer = s.uploading()
    url = s.part_url(answer)
    part_size = s.services.settings.part_size
    grant = presigned.PartGrant(answer["uploadId"], 0, 1, 19, part_size, FAR)
    # Two bodies of this part already arriving (the per-part limit): a third is refused.
    with receiving.BODY_LIMITS.hold(grant), receiving.BODY_LIMITS.hold(grant):
        return s.http.put(url, content=b'{"traceEvents": []}')


def _put_part_expired(s: Scene) -> httpx.Response:
    answer = s.uploading()
    s.clock.advance(days=400)
    return s.http.put(s.signed_part(answer["uploadId"]), content=b'{"traceEvents": []}')


def _archive_of_deleted(s: Scene) -> httpx.Response:
    traceset = s.ready()
    url = s.download(traceset)
    assert s.http.delete(f"{LIST}/{traceset['id']}").status_code == 204
    return s.http.get(url)


def _blob_purged(s: Scene) -> httpx.Response:
    traceset = s.ready()
    url = s.download(traceset, "rank_0.json")
    store = s.services.store
    assert isinstance(store, LocalBlobStore)
    store.blob_path(traceset["files"][0]["hash"].removeprefix("sha256:")).unlink()
    return s.http.get(url)


def _expired(s: Scene, what: str) -> httpx.Response:
    traceset = s.ready(ttlDays=1)
    s.clock.advance(days=1)
    if what == "promote":
        return _promote(s, traceset["id"])
    return s.http.get(f"{LIST}/{traceset['id']}/{what}")


def _public_by_a_member(s: Scene) -> httpx.Response:
    member = person(s.services, "member", "default", ["default"])
    traceset = s.ready()
    assert _promote(s, traceset["id"]).status_code == 200
    return _promote(s, traceset["id"], {"target": "public"}, headers=member.auth)


def _edit(s: Scene, traceset_id: str, body: Any, **kw: Any) -> httpx.Response:
    return s.http.patch(f"{LIST}/{traceset_id}", json=body, **kw)


def _edit_by_a_member(s: Scene) -> httpx.Response:
    member = person(s.services, "member", "default", ["default"])
    return _edit(s, s.ready()["id"], {"name": "theirs"}, headers=member.auth)


def _edit_deleted(s: Scene) -> httpx.Response:
    traceset = s.ready()
    assert s.http.delete(f"{LIST}/{traceset['id']}").status_code == 204
    return _edit(s, traceset["id"], {"name": "x"})


def _complete(s: Scene) -> httpx.Response:
    files = {"rank_0.json": b'{"traceEvents": []}'}
    answer = start_upload(s.http, RANKS_256, files=files)
    body = {"uploadId": answer["uploadId"], "files": send_parts(s.http, answer, files)}
    return s.http.post(COMPLETE, json=body)


def _complete_twice(s: Scene) -> httpx.Response:
    traceset = s.ready()
    return s.http.post(COMPLETE, json=traceset["completeBody"])


def _complete_expired(s: Scene) -> httpx.Response:
    answer = s.uploading()
    s.clock.advance(days=400)
    return s.http.post(COMPLETE, json={"uploadId": answer["uploadId"], "files": []})


def _resume_expired(s: Scene) -> httpx.Response:
    answer = s.uploading()
    s.clock.advance(days=400)
    return s.http.get(f"{UPLOAD}/{answer['uploadId']}")


def _not_ready(s: Scene, what: str) -> httpx.Response:
    traceset_id = s.uploading()["tracesetId"]
    method = "POST" if what == "validate" else "GET"
    return s.http.request(method, f"{LIST}/{traceset_id}/{what}")


def _ambiguous_library(s: Scene) -> httpx.Response:
    made = []
    for tail in "12":
        files = {"a.json": tail.encode()}
        answer = start_upload(s.http, None, files=files, role="supporting")
        body = {"uploadId": answer["uploadId"], "files": send_parts(s.http, answer, files)}
        made.append((s.http.post(COMPLETE, json=body).json()["id"], tail))
    # Two contents whose hashes share 8 hex digits are made, not waited for.
    with s.services.db.session() as session:
        for traceset_id, tail in made:
            session.execute(
                update(db.Traceset)
                .where(db.Traceset.id == traceset_id)
                .values(hash="sha256:" + "ab" * 8 + tail * 48)
            )
    return s.http.get(f"{LIBRARIES}/abababab")


def _analysed(s: Scene) -> str:
    """A one-rank Kineto traceset, analysed."""
    trace = json.dumps(run(0, BASE, world=1).trace()).encode()
    traceset = upload(s.http, {"r0.json": (trace, "primary")}, {"shape": {"rankCount": 1}})
    s.services.wait_for_background()
    return str(traceset["id"])


def _compare(s: Scene, base: str, other: str, **params: str) -> httpx.Response:
    return s.http.get(f"{LIST}/{base}/compare", params={"with": other, **params})


def _unready(s: Scene) -> httpx.Response:
    s.patch(s.services.store, "check", _broken_clock)
    return s.http.get("/readyz")


DRIVERS: dict[tuple[str, int], Driver] = {
    ("list_tracesets", 200): lambda s: s.http.get(LIST),
    ("list_tracesets", 400): lambda s: s.http.get(LIST, params={"limit": "0"}),
    ("list_tracesets", 403): lambda s: s.http.get(LIST, params={"workspaceId": "ws_other"}),
    ("create_traceset", 501): lambda s: s.http.post(LIST, json={}),
    ("request_upload_urls", 200): lambda s: s.http.post(UPLOAD, json=ONE_FILE),
    ("request_upload_urls", 400): lambda s: s.http.post(UPLOAD, json={"name": "x", "files": []}),
    ("request_upload_urls", 403): lambda s: s.http.post(
        UPLOAD,
        json={**ONE_FILE, "workspaceId": "ws_other"},
    ),
    ("request_upload_urls", 413): lambda s: s.http.post(UPLOAD, json=TOO_BIG),
    ("check_upload_url", 200): lambda s: s.http.post(CHECK, json=ONE_FILE),
    ("check_upload_url", 400): lambda s: s.http.post(CHECK, json={"name": "x", "files": []}),
    ("check_upload_url", 403): lambda s: s.http.post(
        CHECK, json={**ONE_FILE, "workspaceId": "ws_other"}
    ),
    ("check_upload_url", 413): lambda s: s.http.post(CHECK, json=TOO_BIG),
    ("census_before_upload", 200): lambda s: s.http.post(CENSUS, json=ONE_HEAD),
    ("census_before_upload", 400): lambda s: s.http.post(CENSUS, json={"files": []}),
    ("census_before_upload", 413): lambda s: s.http.post(
        CENSUS, json={**ONE_HEAD, "pad": "x" * s.services.settings.max_json_body}
    ),
    ("complete_upload", 201): _complete,
    ("complete_upload", 200): _complete_twice,
    ("complete_upload", 400): lambda s: s.http.post(COMPLETE, json={"files": []}),
    ("complete_upload", 404): lambda s: s.http.post(
        COMPLETE, json={"uploadId": "up_x", "files": []}
    ),
    ("complete_upload", 409): lambda s: s.http.post(
        COMPLETE, json={"uploadId": s.failed()["uploadId"], "files": []}
    ),
    ("complete_upload", 410): _complete_expired,
    ("complete_upload", 413): lambda s: s.http.post(COMPLETE, json=TOO_BIG),
    ("resume_upload", 200): lambda s: s.http.get(f"{UPLOAD}/{s.uploading()['uploadId']}"),
    ("resume_upload", 400): lambda s: s.http.get(f"{UPLOAD}/up_x", params={"fromPart": "0"}),
    ("resume_upload", 404): lambda s: s.http.get(f"{UPLOAD}/up_x"),
    ("resume_upload", 409): lambda s: s.http.get(f"{UPLOAD}/{s.failed()['uploadId']}"),
    ("resume_upload", 410): _resume_expired,
    ("get_traceset", 200): lambda s: s.http.get(f"{LIST}/{s.ready()['id']}"),
    ("get_traceset", 404): lambda s: s.http.get(f"{LIST}/ts_x"),
    ("delete_traceset", 204): lambda s: s.http.delete(f"{LIST}/{s.ready()['id']}"),
    ("get_analysis", 200): lambda s: s.http.get(f"{LIST}/{s.ready()['id']}/analysis"),
    ("get_analysis", 400): lambda s: s.http.get(
        f"{LIST}/{s.ready()['id']}/analysis", params={"ranks": "7-0"}
    ),
    ("get_analysis", 404): lambda s: s.http.get(f"{LIST}/ts_x/analysis"),
    ("compare_tracesets", 200): lambda s: _compare(s, _analysed(s), _analysed(s)),
    ("compare_tracesets", 400): lambda s: _compare(s, "ts_x", "ts_y", steps="2-1"),
    ("compare_tracesets", 404): lambda s: _compare(s, "ts_x", "ts_y"),
    ("compare_tracesets", 409): lambda s: _compare(s, _analysed(s), s.ready()["id"]),
    ("delete_traceset", 404): lambda s: s.http.delete(f"{LIST}/ts_x"),
    ("edit_traceset", 200): lambda s: _edit(s, s.ready()["id"], {"name": "renamed"}),
    ("edit_traceset", 400): lambda s: _edit(s, s.ready()["id"], {}),
    ("edit_traceset", 403): _edit_by_a_member,
    ("edit_traceset", 404): lambda s: _edit(s, "ts_x", {"name": "x"}),
    ("edit_traceset", 409): _edit_deleted,
    ("edit_traceset", 413): lambda s: _edit(s, "ts_x", TOO_BIG),
    ("promote_traceset", 200): lambda s: _promote(s, s.ready()["id"]),
    ("promote_traceset", 400): lambda s: s.http.post(
        f"{LIST}/{s.ready()['id']}/promote",
        content=b"{nope",
        headers={"Content-Type": "application/json"},
    ),
    ("promote_traceset", 403): _public_by_a_member,
    ("promote_traceset", 404): lambda s: _promote(s, "ts_x"),
    ("promote_traceset", 409): lambda s: _promote(s, s.uploading()["tracesetId"]),
    ("promote_traceset", 410): lambda s: _expired(s, "promote"),
    ("promote_traceset", 412): lambda s: _promote(s, s.ready(None, role="supporting")["id"]),
    ("promote_traceset", 413): lambda s: _promote(s, "ts_x", TOO_BIG),
    ("promote_traceset", 422): lambda s: _promote(s, s.ready()["id"], {"workloadMetadata": [1]}),
    ("download_traceset", 200): lambda s: s.http.get(f"{LIST}/{s.ready()['id']}/download"),
    ("download_traceset", 400): lambda s: s.http.get(
        f"{LIST}/ts_x/download", headers={"Host": "bad host"}
    ),
    ("download_traceset", 404): lambda s: s.http.get(f"{LIST}/ts_x/download"),
    ("download_traceset", 409): lambda s: _not_ready(s, "download"),
    ("download_traceset", 410): lambda s: _expired(s, "download"),
    ("resolve_traceset", 200): lambda s: s.http.get(f"{LIST}/{s.ready()['id']}/resolve"),
    ("resolve_traceset", 404): lambda s: s.http.get(f"{LIST}/ts_x/resolve"),
    ("resolve_traceset", 409): lambda s: _not_ready(s, "resolve"),
    ("resolve_traceset", 410): lambda s: _expired(s, "resolve"),
    ("validate_traceset", 200): lambda s: s.http.post(f"{LIST}/{s.ready()['id']}/validate"),
    ("validate_traceset", 404): lambda s: s.http.post(f"{LIST}/ts_x/validate"),
    ("validate_traceset", 409): lambda s: _not_ready(s, "validate"),
    ("get_archive", 200): lambda s: s.http.get(s.download(s.ready())),
    ("get_archive", 400): lambda s: s.http.get(_without(s.download(s.ready()), "expires")),
    ("get_archive", 403): lambda s: s.http.get(_bad_signature(s.download(s.ready()))),
    ("get_archive", 404): lambda s: s.http.get(s.services.signer.archive_path("ts_x", FAR)),
    ("get_archive", 409): _archive_of_deleted,
    ("get_archive", 500): lambda s: _broken(
        s, "GET", f"/blobs/archive/ts_x?expires={FAR}&signature=x"
    ),
    ("put_part", 200): lambda s: _put_part(s),
    ("put_part", 400): lambda s: _put_part(s, cut=1),
    ("put_part", 403): lambda s: s.http.put(
        _bad_signature(s.part_url(s.uploading())), content=b"x"
    ),
    ("put_part", 404): lambda s: s.http.put(s.signed_part("up_x"), content=b"x"),
    ("put_part", 409): lambda s: s.http.put(s.part_url(s.failed()), content=b'{"traceEvents": []}'),
    ("put_part", 410): _put_part_expired,
    ("put_part", 413): lambda s: _put_part(s, extra=b"x"),
    ("put_part", 429): _put_part_while_busy,
    ("put_part", 500): lambda s: _broken(s, "PUT", s.signed_part("up_x")),
    ("get_blob", 200): lambda s: s.http.get(s.download(s.ready(), "rank_0.json")),
    ("get_blob", 206): lambda s: s.http.get(
        s.download(s.ready(), "rank_0.json"), headers={"Range": "bytes=0-1"}
    ),
    ("get_blob", 400): lambda s: s.http.get(
        _without(s.download(s.ready(), "rank_0.json"), "expires")
    ),
    ("get_blob", 403): lambda s: s.http.get(_bad_signature(s.download(s.ready(), "rank_0.json"))),
    ("get_blob", 410): _blob_purged,
    ("get_blob", 416): lambda s: s.http.get(
        s.download(s.ready(), "rank_0.json"), headers={"Range": "bytes=1000-2000"}
    ),
    ("get_blob", 500): lambda s: _broken(
        s, "GET", f"/blobs/content/{'0' * 64}?name=a&expires={FAR}&signature=x"
    ),
    ("list_libraries", 200): lambda s: s.http.get(LIBRARIES),
    ("list_libraries", 400): lambda s: s.http.get(LIBRARIES, params={"sort": "unknown"}),
    ("list_libraries", 403): lambda s: s.http.get(LIBRARIES, params={"workspaceId": "ws_other"}),
    ("get_library", 200): lambda s: s.http.get(f"{LIBRARIES}/{s.ready()['hash'][7:15]}"),
    ("get_library", 300): _ambiguous_library,
    ("get_library", 400): lambda s: s.http.get(f"{LIBRARIES}/a1b2"),
    ("get_library", 404): lambda s: s.http.get(f"{LIBRARIES}/lib_notfound"),
    ("healthz", 200): lambda s: s.http.get("/healthz"),
    ("readyz", 200): lambda s: s.http.get("/readyz"),
    ("readyz", 503): _unready,
}


def _generic(operation: str, status: int) -> Driver:
    method, path = API_OPERATIONS[operation]

    def drive(s: Scene) -> httpx.Response:
        if status == 401:
            return s.http.request(method, path, json={}, headers={"Authorization": ""})
        if status == 500:
            s.patch(s.services, "clock", _broken_clock)
            return s.http.request(method, path, json={})
        # 503: JWT login whose identity provider cannot be reached.
        settings = s.services.settings.model_copy(
            update={
                "jwks_url": "http://127.0.0.1:9/jwks.json",
                "jwks_file": None,
                "jwt_issuer": ISSUER,
                "jwt_audience": AUDIENCE,
            }
        )
        services = build_services(settings, clock=s.clock)
        try:
            with TestClient(create_app(services=services), raise_server_exceptions=False) as h:
                http: httpx.Client = h
                headers = {"Authorization": f"Bearer {token()}"}
                return http.request(method, path, json={}, headers=headers)
        finally:
            services.close()

    return drive


for _operation in API_OPERATIONS:
    for _status in GENERIC:
        DRIVERS[(_operation, _status)] = _generic(_operation, _status)


def documented(http: httpx.Client) -> set[tuple[str, int]]:
    document = http.get("/openapi.json").json()
    return {
        (operation["operationId"], int(status))
        for operations in document["paths"].values()
        for operation in operations.values()
        for status in operation["responses"]
    }


def test_every_documented_status_has_a_driver_and_no_other(scene: Scene) -> None:
    assert documented(scene.http) == set(DRIVERS)


@pytest.mark.parametrize(("operation", "status"), sorted(DRIVERS), ids=lambda v: str(v))
def test_the_app_answers_each_documented_status(scene: Scene, operation: str, status: int) -> None:
    response = DRIVERS[(operation, status)](scene)
    assert response.status_code == status, response.text
    if status >= 400 and status != 416:
        assert_error(response, status, ERRORS_BY_STATUS[status].code)
