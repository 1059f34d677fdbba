"""JSON request bodies (issue 41): each route takes what its rules allow (``BodyLimits``), and
upload-url parses a big body off the event loop, through its lane and its route alike
(tests/test_serve_bodies.py shows ``/healthz`` answering meanwhile, through ``serve``)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.envelopes import assert_error
from tests.support.uploading import UPLOAD_URL
from tracestore.server import uploads
from tracestore.server.app import create_app
from tracestore.server.services import Services
from tracestore.server.serving.request_context import SMALL_BODY, UPLOAD_FILE_BODY, BodyLimits
from tracestore.server.settings import MIB
from tracestore.server.uploads import INLINE_BODY


def upload_body(size: int, files: int = 1) -> bytes:
    """A legal upload-url body of at least ``size`` bytes: ``files`` files, and an unknown
    member making up the rest."""
    head = {
        "name": "bodies",
        "files": [{"name": f"f{i}.bin", "size": 1, "role": "supporting"} for i in range(files)],
    }
    text = json.dumps(head).encode()
    padding = max(0, size - len(text))
    return text[:-1] + b', "junk": "' + b"j" * padding + b'"}'


def test_each_route_takes_what_its_rules_allow(services: Services) -> None:
    limits = BodyLimits.of(services.settings)
    assert limits.other == SMALL_BODY < limits.upload_url == limits.complete == 16 * MIB
    fewer = services.settings.model_copy(update={"max_files_per_upload": 10})
    assert BodyLimits.of(fewer).upload_url == SMALL_BODY + 10 * UPLOAD_FILE_BODY
    tiny = services.settings.model_copy(update={"max_json_body": 4096})
    assert BodyLimits.of(tiny) == BodyLimits(4096, 4096, 4096)


def test_a_promote_body_past_the_small_limit_is_413_where_upload_url_takes_it(
    both: tuple[TestClient, TestClient], admin_token: str
) -> None:
    for http in both:
        http.headers["Authorization"] = f"Bearer {admin_token}"
        big = upload_body(SMALL_BODY + 1)
        assert http.post(UPLOAD_URL, content=big).status_code == 200
        promote = json.dumps({"target": "tenant", "description": "d" * SMALL_BODY}).encode()
        answer = http.post("/api/v1/tracesets/ts_x/promote", content=promote)
        assert assert_error(answer, 413, "PAYLOAD_TOO_LARGE")["message"] == (
            f"The request body is larger than the limit of {SMALL_BODY} bytes"
        )


def test_upload_url_bodies_follow_the_files_an_upload_may_hold(
    services: Services, admin_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services.settings, "max_files_per_upload", 10)
    limit = SMALL_BODY + 10 * UPLOAD_FILE_BODY
    for with_lanes in (True, False):
        app = create_app(services=services, with_lanes=with_lanes)
        with TestClient(app, raise_server_exceptions=False) as http:
            http.headers["Authorization"] = f"Bearer {admin_token}"
            assert http.post(UPLOAD_URL, content=upload_body(limit - 64, 10)).status_code == 200
            assert http.post(UPLOAD_URL, content=upload_body(limit + 1)).status_code == 413


def test_a_big_upload_url_body_is_parsed_off_the_event_loop(
    both: tuple[TestClient, TestClient], admin_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parsed on the event loop's thread, two 16 MiB bodies held everyone for seconds."""
    parsed_on: list[tuple[int, str]] = []
    parse = uploads.parse_upload_request

    def recorded(body: bytes) -> Any:
        parsed_on.append((len(body), threading.current_thread().name))
        return parse(body)

    monkeypatch.setattr(uploads, "parse_upload_request", recorded)
    for http in both:
        http.headers["Authorization"] = f"Bearer {admin_token}"
        parsed_on.clear()
        small, big = upload_body(1000), upload_body(INLINE_BODY + 1)
        assert [http.post(UPLOAD_URL, content=b).status_code for b in (small, big)] == [200] * 2
        # (A small one is parsed where its write runs: on SQLite, the event loop's thread.)
        (_, big_thread) = parsed_on[1]
        assert big_thread.startswith("AnyIO worker thread"), parsed_on
