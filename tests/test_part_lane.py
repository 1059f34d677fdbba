"""The embedded store's part PUT and its lane (``lanes.part``): every PUT the lane
takes is answered as FastAPI's route answers it, status, headers and body (but the request
id and the ETag, which each send of a part has of its own); what it does not take (a
malformed path or query, another method) the route words."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.support.laning import comparable, drive, presigned_path, taken_by
from tests.support.uploading import checksum_b64, complete, put_parts, request_upload
from tracestore.server.app import create_app
from tracestore.server.services import Services

_ETAG = re.compile(r'"[0-9a-f]+"')


def _signed(url: str, **changes: str) -> str:
    """``url``'s path and query with the query's ``changes`` (a name's value replaced, or
    the pair dropped for an empty change)."""
    path, _, query = presigned_path(url).partition("?")
    pairs = [pair.split("=", 1) for pair in query.split("&")]
    kept = [
        f"{name}={changes.get(name, value)}" for name, value in pairs if changes.get(name) != ""
    ]
    return f"{path}?{'&'.join(kept)}"


def _part_requests(http: TestClient) -> list[tuple[str, str, bytes, dict[str, str]]]:
    """(method, path, body, headers) of part PUTs good and bad, every way a lane must answer
    as the route does or leave to it; the upload's first file is 10 bytes."""
    data = b"0123456789"
    files = {"a.bin": (data, "supporting"), "b.bin": (data, "supporting")}
    answer = request_upload(http, files).json()
    url = answer["files"][0]["parts"][0]["url"]
    other = answer["files"][1]["parts"][0]["url"]
    path, _, query = presigned_path(url).partition("?")
    good = f"{path}?{query}"
    signature = httpx.URL(url).params["signature"]
    checksum = {"x-amz-checksum-sha256": "AAAA"}
    return [
        ("PUT", good, data, {}),
        ("PUT", good, data, {"x-amz-checksum-sha256": checksum_b64(data)}),
        ("PUT", good, data, checksum),
        ("PUT", good, data + b"!", {}),  # longer than the part: 413
        ("PUT", good, data[:4], {}),  # shorter: 400
        ("PUT", presigned_path(other), data, {}),
        ("PUT", _signed(url, signature="x" + signature[1:]), data, {}),
        ("PUT", _signed(url, expires="1"), data, {}),
        ("PUT", _signed(url, size="11"), data, {}),
        ("PUT", _signed(url, size="010"), data, {}),  # digits the lane reads as the route
        ("PUT", good.replace("/0/1?", "/00/01?"), data, {}),
        ("PUT", good.replace(answer["uploadId"], "upload_nosuch"), data, {}),
        ("PUT", good + "&ignored=1", data, {}),
        ("PUT", f"{good}&signature=nope", data, {}),  # the last of a repeated name counts
        ("PUT", f"{path}?signature=nope&{query}", data, {}),
        # What no lane takes: the route words these refusals.
        ("PUT", _signed(url, signature=""), data, {}),
        ("PUT", _signed(url, size=""), data, {}),
        ("PUT", _signed(url, size="ten"), data, {}),
        ("PUT", _signed(url, size="-10"), data, {}),
        ("PUT", _signed(url, partSize="1" * 19), data, {}),
        ("PUT", good.replace("/0/1?", "/0/one?"), data, {}),
        ("PUT", good.replace("/0/1?", "/0/1/?"), data, {}),
        ("PUT", good.replace("/0/1?", "/0/?"), data, {}),
        ("POST", good, data, {}),
        ("GET", good, b"", {}),
    ]


def test_the_part_lane_answers_what_its_route_answers(
    services: Services,
    http: TestClient,
    both: tuple[TestClient, TestClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    laned, routed = both
    taken = taken_by(monkeypatch, "_put_part")
    requests = _part_requests(http)
    statuses = set()
    for method, path, body, headers in requests:
        ours, theirs = (
            client.request(method, path, content=body, headers=headers, follow_redirects=False)
            for client in (laned, routed)
        )
        # Each send of a part has an ETag of its own.
        assert _ETAG.fullmatch(ours.headers.get("etag", '"0"'))
        assert comparable(ours, etag=True) == comparable(theirs, etag=True), (method, path)
        statuses.add(ours.status_code)
    assert statuses == {200, 307, 400, 403, 404, 405, 413}
    # The requests before "What no lane takes".
    assert [f"{s['path']}?{s['query_string'].decode()}" for s in taken] == [
        path for method, path, _, _ in requests[:15]
    ]


def test_the_part_lane_refuses_a_part_of_a_finished_session_as_its_route(
    http: TestClient, both: tuple[TestClient, TestClient]
) -> None:
    data = b"0123456789"
    files = {"a.bin": (data, "supporting")}
    answer = request_upload(http, files).json()
    url = answer["files"][0]["parts"][0]["url"]
    etags = put_parts(http, answer, files)
    assert complete(http, answer["uploadId"], etags).status_code == 201
    laned, routed = both
    ours, theirs = (client.put(presigned_path(url), content=data) for client in (laned, routed))
    assert ours.status_code == 409, ours.text
    assert comparable(ours) == comparable(theirs)


def test_a_part_put_with_a_length_of_other_digits_is_no_server_error(
    services: Services, http: TestClient
) -> None:
    """``"²".isdigit()`` is true but ``int("²")`` fails: a Content-Length of such digits
    (which uvicorn's parser refuses, another server may pass) was a 500 from the route and
    the lane. It is a length the part's check does not read, as any other non-number."""
    answer = request_upload(http, {"a.bin": (b"0123456789", "supporting")}).json()
    path = presigned_path(answer["files"][0]["parts"][0]["url"])
    body: list[dict[str, Any]] = [
        {"type": "http.request", "body": b"0123456789", "more_body": False}
    ]
    for flag in (True, False):
        app = create_app(services=services, with_lanes=flag)
        status, text = asyncio.run(
            drive(app, "PUT", path, [(b"content-length", "²".encode("latin-1"))], list(body))
        )
        assert status == 200, text
