"""The part PUTs of an upload through real HTTP: signed part URLs tampered with or expired,
bodies of the wrong size (chunked ones checked as they arrive), the checksum header verified,
a part sent again replacing the first; a refused part stores nothing."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import pytest
from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.uploading import complete, one_part_upload, record_counts
from tracestore.server.services import Services


def _with_query(url: str, **changes: Any) -> str:
    parts = urlparse(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query.update({k: str(v) for k, v in changes.items()})
    return urlunparse(parts._replace(query=urlencode(query)))


@pytest.mark.parametrize(
    "change,status",
    [
        ({"signature": "AAAA"}, 403),
        ({"size": 3}, 403),
        ({"expires": 4102444800}, 403),
    ],
)
def test_tampered_part_urls_are_refused_and_store_nothing(
    http: TestClient, services: Services, change: dict[str, Any], status: int
) -> None:
    answer = one_part_upload(http, b"abcd")
    before = record_counts(services)
    url = _with_query(answer["files"][0]["parts"][0]["url"], **change)
    response = http.put(url, content=b"abcd")
    assert_error(response, status, "FORBIDDEN")
    assert record_counts(services) == before


def test_expired_part_url_is_refused(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    answer = one_part_upload(http, b"abcd")
    clock.advance(hours=1, seconds=1)
    before = record_counts(services)
    response = http.put(answer["files"][0]["parts"][0]["url"], content=b"abcd")
    assert "expired" in assert_error(response, 403, "FORBIDDEN")["message"]
    assert record_counts(services) == before


@pytest.mark.parametrize("sent,status", [(b"abc", 400), (b"abcde", 413)])
def test_wrong_size_parts_are_refused_and_keep_the_good_part(
    http: TestClient, services: Services, sent: bytes, status: int
) -> None:
    answer = one_part_upload(http, b"abcd")
    url = answer["files"][0]["parts"][0]["url"]
    good = http.put(url, content=b"abcd")
    assert good.status_code == 200
    before = record_counts(services)
    response = http.put(url, content=sent)
    assert response.status_code == status, response.text
    assert record_counts(services) == before
    etags = {"r.et": [{"partNumber": 1, "etag": good.headers["etag"]}]}
    done = complete(http, answer["uploadId"], etags)
    assert done.status_code == 201, done.text
    assert done.json()["files"][0]["hash"] == "sha256:" + hashlib.sha256(b"abcd").hexdigest()


def test_chunked_part_bodies_are_size_checked_as_they_arrive(
    http: TestClient, services: Services
) -> None:
    answer = one_part_upload(http, b"abcd")
    url = answer["files"][0]["parts"][0]["url"]
    before = record_counts(services)
    response = http.put(url, content=iter([b"ab", b"cd", b"e"]))
    assert response.status_code == 413
    assert record_counts(services) == before


def test_part_checksum_header_is_verified(http: TestClient, services: Services) -> None:
    import base64

    answer = one_part_upload(http, b"abcd")
    url = answer["files"][0]["parts"][0]["url"]
    wrong = base64.b64encode(hashlib.sha256(b"xxxx").digest()).decode()
    before = record_counts(services)
    response = http.put(url, content=b"abcd", headers={"x-amz-checksum-sha256": wrong})
    assert "x-amz-checksum-sha256" in assert_error(response, 400, "VALIDATION_ERROR")["message"]
    assert record_counts(services) == before
    right = base64.b64encode(hashlib.sha256(b"abcd").digest()).decode()
    assert (
        http.put(url, content=b"abcd", headers={"x-amz-checksum-sha256": right}).status_code == 200
    )


def test_resending_a_part_replaces_it(http: TestClient) -> None:
    answer = one_part_upload(http, b"abcd")
    url = answer["files"][0]["parts"][0]["url"]
    old = http.put(url, content=b"wxyz").headers["etag"]
    new = http.put(url, content=b"abcd").headers["etag"]
    stale = complete(http, answer["uploadId"], {"r.et": [{"partNumber": 1, "etag": old}]})
    assert "ETag" in assert_error(stale, 400, "VALIDATION_ERROR")["message"]
    done = complete(http, answer["uploadId"], {"r.et": [{"partNumber": 1, "etag": new}]})
    assert done.json()["files"][0]["hash"] == "sha256:" + hashlib.sha256(b"abcd").hexdigest()
