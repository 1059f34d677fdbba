"""The HTTP contract that holds for every route: authentication, the one error envelope,
body limits, and a valid OpenAPI description."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate

from tests.support.envelopes import assert_error
from tests.support.uploading import COMPLETE_URL, UPLOAD_URL, raw_post
from tracestore.errors import ERRORS_BY_CODE
from tracestore.schemas import MAX_NAME_BYTES, NAME_PATTERN, file_name_problem
from tracestore.server.app import create_app
from tracestore.server.listing.pages import BAD_CURSOR
from tracestore.server.listing.query import CURSOR_PATTERN
from tracestore.server.services import Services
from tracestore.server.settings import Settings


def api_routes(http: TestClient) -> Iterator[tuple[str, str]]:
    """Every (method, concrete path) under /api/v1 the app serves."""
    for path, operations in http.app.openapi()["paths"].items():  # type: ignore[attr-defined]
        if not path.startswith("/api/v1"):
            continue
        concrete = re.sub(r"\{[^}]+\}", "ts_x", path)
        for method in operations:
            yield method.upper(), concrete


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic abc",
        "Bearer wrong-token",
        "Bearer a.b.c",
        "bearer  x y",
    ],
)
def test_every_api_route_needs_a_valid_bearer_token(
    http: TestClient, authorization: str | None
) -> None:
    routes = list(api_routes(http))
    assert len(routes) >= 6
    for method, path in routes:
        headers = {} if authorization is None else {"Authorization": authorization}
        http.headers.pop("Authorization", None)
        response = http.request(method, path, headers=headers, json={})
        error = assert_error(response, 401, "UNAUTHORIZED")
        assert error["message"] == "Invalid or missing authentication token"


def test_revoked_and_expired_tokens_are_refused(http: TestClient, services: Services) -> None:
    from datetime import timedelta

    from sqlalchemy import select

    from tracestore.server import db
    from tracestore.server.auth import issue_token, revoke_token

    now = services.now()
    with services.db.session() as session:
        user_id = session.scalars(select(db.User.id)).first()
        assert user_id is not None
        revoked = issue_token(session, user_id, "r", now)
        expiring = issue_token(session, user_id, "e", now, now + timedelta(hours=1))
    with services.db.session() as session:
        revoke_token(session, revoked.id, now)
    assert (
        http.get(
            "/api/v1/tracesets/ts_x", headers={"Authorization": f"Bearer {expiring.token}"}
        ).status_code
        == 404
    )
    for token in (revoked.token, expiring.token):
        if token == expiring.token:
            services.clock.advance(hours=2)  # type: ignore[attr-defined]
        response = http.get("/api/v1/tracesets/ts_x", headers={"Authorization": f"Bearer {token}"})
        assert_error(response, 401, "UNAUTHORIZED")


def test_error_envelope_for_each_status(http: TestClient) -> None:
    assert_error(
        http.post(UPLOAD_URL, content=b"{nope", headers={"Content-Type": "application/json"}),
        400,
        "VALIDATION_ERROR",
    )
    assert_error(
        http.post("/api/v1/tracesets/upload-url/complete", json={"files": []}),
        400,
        "VALIDATION_ERROR",
    )
    assert_error(http.get("/api/v1/tracesets/ts_missing"), 404, "NOT_FOUND")
    assert_error(http.get("/no/such/route"), 404, "NOT_FOUND")
    assert_error(http.patch("/api/v1/tracesets/upload-url/complete"), 405, "METHOD_NOT_ALLOWED")
    error = assert_error(http.post("/api/v1/tracesets", json={}), 501, "NOT_IMPLEMENTED")
    assert "upload-url" in error["message"]
    assert_error(
        http.post(
            UPLOAD_URL,
            json={
                "name": "x",
                "workspaceId": "workspace_other",
                "files": [{"name": "a", "size": 1, "role": "supporting"}],
            },
        ),
        403,
        "FORBIDDEN",
    )


def test_an_upload_without_files_is_refused_in_the_references_words(http: TestClient) -> None:
    empty = assert_error(
        http.post(UPLOAD_URL, json={"name": "x", "files": []}), 400, "VALIDATION_ERROR"
    )
    assert empty["message"] == "At least one file is required"
    missing = assert_error(http.post(UPLOAD_URL, json={"name": "x"}), 400, "VALIDATION_ERROR")
    assert missing["message"] == "files is required"


def test_request_validation_errors_name_the_member(http: TestClient) -> None:
    cases = [
        ({"name": "", "files": [{"name": "a", "size": 1, "role": "supporting"}]}, "name"),
        (
            {"name": "x", "files": [{"name": "a", "size": "5", "role": "supporting"}]},
            "files[0].size",
        ),
        (
            {"name": "x", "files": [{"name": "a", "size": -1, "role": "supporting"}]},
            "files[0].size",
        ),
        ({"name": "x", "files": [{"name": "a", "size": 1, "role": "other"}]}, "files[0].role"),
        (
            {"name": "x", "files": [{"name": "a", "size": 1, "role": "primary"}] * 2},
            "File name 'a' appears more than once",
        ),
        (
            {"name": "x", "ttlDays": 0, "files": [{"name": "a", "size": 1, "role": "supporting"}]},
            "ttlDays",
        ),
        (
            {"name": "x", "files": [{"name": "a", "size": 6 * 1024**4, "role": "supporting"}]},
            "files[0].size",
        ),
    ]
    for body, needle in cases:
        error = assert_error(http.post(UPLOAD_URL, json=body), 400, "VALIDATION_ERROR")
        assert needle in error["message"], (body, error)


@pytest.mark.parametrize(
    "name,problem",
    [
        ("/abs", "absolute"),
        ("a//b", "empty segment"),
        ("a/../b", "'..' segment"),
        ("./a", "'.' segment"),
        ("a\\b", "backslash"),
        ("a\tb", "control character"),
        ("a b", "outside"),
        ("", "empty"),
        ("x" * 1025, "1024 bytes"),
    ],
)
def test_bad_file_names_are_refused_naming_the_file(
    http: TestClient, name: str, problem: str
) -> None:
    body = {"name": "x", "files": [{"name": name, "size": 1, "role": "supporting"}]}
    error = assert_error(http.post(UPLOAD_URL, json=body), 400, "VALIDATION_ERROR")
    assert problem in error["message"]
    assert not re.fullmatch(NAME_PATTERN, name) or len(name) > MAX_NAME_BYTES  # described


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.from_regex(NAME_PATTERN, fullmatch=True).filter(lambda n: len(n) <= MAX_NAME_BYTES))
def test_every_name_the_description_allows_is_a_good_file_name(name: str) -> None:
    """The OpenAPI description's pattern and maxLength for a file name are the rule itself
    (schemathesis ST202 sent names the description allowed and the route refused)."""
    assert file_name_problem(name) is None


def test_integral_numbers_are_integers_as_the_description_says(http: TestClient) -> None:
    """JSON Schema's integer is any whole number: 1.0 and 1e1 are integers (a partNumber of
    1.0 was refused, schemathesis ST202)."""
    body = '{"name":"x","ttlDays":7.0,"files":[{"name":"a","size":1e1,"role":"supporting"}]}'
    assert raw_post(http, UPLOAD_URL, body).status_code == 200
    done = '{"uploadId":"upload_x","files":[{"name":"a","parts":[{"partNumber":1.0,"etag":"e"}]}]}'
    assert_error(raw_post(http, COMPLETE_URL, done), 404, "NOT_FOUND")
    half = done.replace("1.0", "1.5")
    message = assert_error(raw_post(http, COMPLETE_URL, half), 400, "VALIDATION_ERROR")
    assert message["message"].startswith("files[0].parts[0].partNumber")


@pytest.mark.parametrize("route", ["/api/v1/tracesets", "/api/v1/libraries"])
def test_a_cursor_not_of_the_described_form_is_told_apart_from_a_forged_one(
    http: TestClient, route: str
) -> None:
    for text in ("", "abc", "a.b.c", "a b.c"):
        assert not re.fullmatch(CURSOR_PATTERN, text)
        error = assert_error(http.get(route, params={"next": text}), 400, "VALIDATION_ERROR")
        assert error["message"] == "next must be a cursor from pagination.nextCursor"
    forged = assert_error(http.get(route, params={"next": "YQ.Yg"}), 400, "VALIDATION_ERROR")
    assert forged["message"] == BAD_CURSOR


def test_good_file_names_are_accepted(http: TestClient) -> None:
    names = ["rank_0.et", "a/b/c.json.gz", "w=1+x@y-z.tar", "." + "x" * 1000]
    body = {"name": "x", "files": [{"name": n, "size": 1, "role": "supporting"} for n in names]}
    assert http.post(UPLOAD_URL, json=body).status_code == 200


def test_json_bodies_over_the_limit_answer_413_before_being_read(
    services: Services, admin_token: str
) -> None:
    small = Settings(**{**services.settings.model_dump(), "max_json_body": 4096})
    app = create_app(
        services=Services(
            settings=small,
            db=services.db,
            store=services.store,
            signer=services.signer,
            clock=services.clock,
        )
    )
    with TestClient(app) as http:
        http.headers["Authorization"] = f"Bearer {admin_token}"
        big = {
            "name": "x",
            "description": "d" * 5000,
            "files": [{"name": "a", "size": 1, "role": "supporting"}],
        }
        assert_error(http.post(UPLOAD_URL, json=big), 413, "PAYLOAD_TOO_LARGE")

        def chunks() -> Iterator[bytes]:
            yield b'{"name":"x","description":"'
            for _ in range(10):
                yield b"d" * 1000
            yield b'"}'

        response = http.post(
            UPLOAD_URL, content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert_error(response, 413, "PAYLOAD_TOO_LARGE")


def test_unexpected_errors_are_500_without_internals(
    http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracestore.server import tracesets

    def broken(*_: object) -> None:
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(tracesets, "get_traceset", broken)
    error = assert_error(http.get("/api/v1/tracesets/ts_x"), 500, "INTERNAL_ERROR")
    assert "secret" not in error["message"]


def test_every_error_code_has_one_class() -> None:
    assert {
        "VALIDATION_ERROR",
        "UNAUTHORIZED",
        "FORBIDDEN",
        "NOT_FOUND",
        "CONFLICT",
        "GONE",
        "PRECONDITION_FAILED",
        "PAYLOAD_TOO_LARGE",
        "UNPROCESSABLE_ENTITY",
        "INTERNAL_ERROR",
        "NOT_IMPLEMENTED",
    } <= set(ERRORS_BY_CODE)


def test_health_and_readiness(http: TestClient) -> None:
    http.headers.pop("Authorization", None)
    assert http.get("/healthz").json()["status"] == "ok"
    ready = http.get("/readyz").json()
    assert ready == {"status": "ok", "checks": {"database": "ok", "blobStore": "ok"}}


def test_openapi_description_is_valid_and_documents_the_seed_schema(http: TestClient) -> None:
    document = http.get("/openapi.json").json()
    validate(document)
    schemas = document["components"]["schemas"]
    upload = schemas["UploadWorkloadMetadata"]
    assert set(upload["properties"]) >= {"shape", "parallelism"}
    shape = schemas["WorkloadShape"]["properties"]["rankCount"]
    assert "2147483647" in str(shape) and "1" in str(shape)
    parallelism = schemas["WorkloadParallelism"]["properties"]
    assert {"dp", "tp", "sp", "ep", "pp", "cp", "fsdp"} <= set(parallelism)
    # Upload stores cp and fsdp unchecked (the seed): the description may not narrow them
    # (schema fuzzing sent "fsdp": "x", which upload rightly accepts).
    assert all(
        "type" not in parallelism[d] and "anyOf" not in parallelism[d] for d in ("cp", "fsdp")
    )
    assert "WorkloadMetadata" in schemas
    request_body = document["paths"]["/api/v1/tracesets/upload-url"]["post"]["requestBody"]
    assert request_body["content"]["application/json"]["schema"]["$ref"].endswith(
        "/TracesetUploadUrlRequest"
    )
    assert "UploadWorkloadMetadata" in str(schemas["TracesetUploadUrlRequest"])
    for path, operations in document["paths"].items():
        for operation in operations.values():
            assert "HTTPValidationError" not in str(operation.get("responses", {})), path
    # A bound pydantic could not turn into JSON Schema is written as its own name (ge, le):
    # a constraint the description would miss (ttlDays once).
    assert not re.search(r'"(ge|le|gt|lt)":', json.dumps(document))


def test_presigned_routes_document_no_401(http: TestClient) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    blob_operations = [
        (path, method, operation)
        for path, operations in paths.items()
        if path.startswith("/blobs/")
        for method, operation in operations.items()
    ]
    assert len(blob_operations) == 3
    for path, method, operation in blob_operations:
        assert "401" not in operation["responses"], (method, path)  # a signature, no token
        assert "security" not in operation, (method, path)


def test_the_description_serves_generated_clients(http: TestClient) -> None:
    document = http.get("/openapi.json").json()
    paths, schemas = document["paths"], document["components"]["schemas"]
    operation_ids = [op["operationId"] for ops in paths.values() for op in ops.values()]
    assert {"list_tracesets", "request_upload_urls", "complete_upload", "put_part"} <= set(
        operation_ids
    )
    assert all(re.fullmatch(r"[a-z_]+", name) for name in operation_ids), operation_ids
    assert {
        "TracesetUploadUrlRequest",
        "CompletedFileInput",
        "CompletedPart",
        "PartUploadUrl",
        "FileUploadUrls",
        "FileResponse",
    } <= set(schemas)
    assert not {"UploadRequest", "CompleteFile", "TracesetFile", "PartUrl"} & set(schemas)
    for member in ("createdAt", "updatedAt", "expiresAt"):
        assert "date-time" in str(schemas["Traceset"]["properties"][member]), member
    part = paths["/blobs/parts/{upload_id}/{position}/{part_number}"]["put"]
    assert part["requestBody"]["content"]["application/octet-stream"]["schema"] == {
        "type": "string",
        "format": "binary",
    }
    assert (
        "content" not in part["responses"]["200"] and "ETag" in part["responses"]["200"]["headers"]
    )
    archive = paths["/blobs/archive/{traceset_id}"]["get"]["responses"]["200"]["content"]
    assert archive["application/zip"]["schema"]["format"] == "binary"
    create = paths["/api/v1/tracesets"]["post"]["responses"]
    assert set(create) == {"401", "500", "501", "503"}
    assert create["501"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorEnvelope")
    listed = {p["name"] for p in paths["/api/v1/tracesets"]["get"]["parameters"]}
    assert {"workload_family", "workload_name", "shape.global_batch_size"} <= listed
    status = next(
        p for p in paths["/api/v1/tracesets"]["get"]["parameters"] if p["name"] == "status"
    )
    assert {"processing", "metadata_failed"} <= set(status["schema"]["enum"])


def test_every_405_names_the_methods_the_path_allows(
    both: tuple[TestClient, TestClient], admin_token: str
) -> None:
    """RFC 9110: a 405 carries Allow. Fourteen did not (schemathesis ST204), and where two
    routes share a path the router's own header named only the first one's method."""
    for http in both:
        http.headers["Authorization"] = f"Bearer {admin_token}"
        document = http.get("/openapi.json").json()
        pages: dict[str, dict[str, Any]] = {
            "/": {"get": {}, "head": {}},
            "/docs": {"get": {}},
            "/redoc": {"get": {}},
        }
        paths = {**document["paths"], **pages}
        for path in paths:
            concrete = re.sub(r"\{[^}]+\}", "x", path)
            # Every template the path matches (upload-url is also a traceset id to the router).
            documented = {
                method.upper()
                for template, operations in paths.items()
                if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), concrete)
                for method in operations
            }
            for method in {"TRACE", "PATCH", "PUT", "DELETE", "POST"} - documented:
                response = http.request(method, concrete)
                assert response.status_code == 405, (method, path, response.text)
                assert_error(response, 405, "METHOD_NOT_ALLOWED")
                allowed = set(response.headers["allow"].split(", "))
                assert allowed == documented, (method, path, allowed)
        answer = http.request("TRACE", "/static/app.js")
        assert answer.status_code == 405 and answer.headers["allow"] == "GET, HEAD"
