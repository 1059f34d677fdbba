"""The one signer of the presigned URLs the service answers: each kind of URL verifies
against its own fields only, and only until it expires."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from tracestore.errors import Forbidden, ValidationError
from tracestore.server.presigned import (
    PartGrant,
    RequestOrigin,
    UrlSigner,
    redacted,
    request_base_url,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EXPIRES = int(NOW.timestamp()) + 60
SHA = "ab" * 32


def _query(path: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(path).query).items()}


def test_each_kind_of_url_has_its_path_and_verifies_until_it_expires() -> None:
    signer = UrlSigner(b"key")
    grant = PartGrant("upload_a", 2, 3, 100, 5 << 20, EXPIRES)
    part = signer.part_path(grant)
    assert urlparse(part).path == "/blobs/parts/upload_a/2/3"
    assert _query(part) == {
        "size": "100",
        "partSize": str(5 << 20),
        "expires": str(EXPIRES),
        "signature": _query(part)["signature"],
    }
    signer.verify_part(grant, _query(part)["signature"], NOW)
    content = signer.content_path(SHA, "a b.txt", EXPIRES)
    assert urlparse(content).path == f"/blobs/content/{SHA}"
    signer.verify_content(SHA, "a b.txt", EXPIRES, _query(content)["signature"], NOW)
    archive = signer.archive_path("ts_a", EXPIRES)
    assert urlparse(archive).path == "/blobs/archive/ts_a"
    signature = _query(archive)["signature"]
    signer.verify_archive("ts_a", EXPIRES, signature, NOW)
    with pytest.raises(Forbidden, match="expired"):
        signer.verify_archive("ts_a", EXPIRES, signature, datetime.fromtimestamp(EXPIRES, UTC))


@pytest.mark.parametrize("key", [b"key", b"another key", bytes(range(32))])
def test_a_part_urls_query_is_what_urlencode_writes(key: bytes) -> None:
    """part_path writes its query without urlencode: every value must need no quoting."""
    signer = UrlSigner(key)
    for grant in (
        PartGrant("upload_a", 0, 1, 0, 1, 0),
        PartGrant("upload_b", 7, 12, 5 << 20, 5 << 20, EXPIRES),
        PartGrant("upload_c", 1, 1, 2**40, 2**33, 2**40),
    ):
        query = signer.part_path(grant).partition("?")[2]
        signature = _query(signer.part_path(grant))["signature"]
        assert query == urlencode(
            {
                "size": grant.size,
                "partSize": grant.part_size,
                "expires": grant.expires,
                "signature": signature,
            }
        )


def test_a_signature_grants_only_what_it_was_made_for() -> None:
    signer = UrlSigner(b"key")
    signature = _query(signer.archive_path("ts_a", EXPIRES))["signature"]
    with pytest.raises(Forbidden, match="does not match"):
        signer.verify_archive("ts_b", EXPIRES, signature, NOW)
    with pytest.raises(Forbidden, match="does not match"):
        signer.verify_archive("ts_a", EXPIRES + 1, signature, NOW)
    with pytest.raises(Forbidden, match="does not match"):
        UrlSigner(b"other").verify_archive("ts_a", EXPIRES, signature, NOW)
    content = _query(signer.content_path(SHA, "x", EXPIRES))["signature"]
    with pytest.raises(Forbidden, match="does not match"):
        signer.verify_content(SHA, "y", EXPIRES, content, NOW)
    grant = PartGrant("upload_a", 0, 1, 100, 100, EXPIRES)
    part = _query(signer.part_path(grant))["signature"]
    with pytest.raises(Forbidden, match="does not match"):
        signer.verify_part(PartGrant("upload_a", 0, 1, 99, 100, EXPIRES), part, NOW)


# --- the base the URLs are built on: where the caller reached the service ---


def _origin(host: str | None, **extra: Any) -> RequestOrigin:
    return RequestOrigin(scheme="http", host=host, local=("10.0.0.7", 9000), **extra)


@pytest.mark.parametrize(
    ("host", "base"),
    [
        ("127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("traces.example.org", "http://traces.example.org"),
        ("[::1]:9000", "http://[::1]:9000"),
        # A client that dialled the wildcard itself: the address its connection reached.
        ("0.0.0.0:9000", "http://10.0.0.7:9000"),
        ("[::]:9000", "http://10.0.0.7:9000"),
        (None, "http://10.0.0.7:9000"),
    ],
)
def test_the_base_is_the_host_the_request_was_sent_to(host: str | None, base: str) -> None:
    assert request_base_url(_origin(host)) == base


def test_forwarded_headers_count_only_from_a_trusted_proxy() -> None:
    forwarded = {"forwarded_proto": "https", "forwarded_host": "traces.example.org"}
    assert request_base_url(_origin("10.0.0.7:9000", **forwarded)) == "http://10.0.0.7:9000"
    trusted = _origin("10.0.0.7:9000", trusted=True, **forwarded)
    assert request_base_url(trusted) == "https://traces.example.org"


@pytest.mark.parametrize(
    ("origin", "named"),
    [
        (_origin("evil.org/x"), "Host header"),
        (_origin("a b"), "Host header"),
        (_origin("h", trusted=True, forwarded_proto="gopher"), "X-Forwarded-Proto"),
        (_origin("h", trusted=True, forwarded_host="a@b"), "X-Forwarded-Host"),
    ],
)
def test_a_malformed_host_is_a_validation_error(origin: RequestOrigin, named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        request_base_url(origin)


def test_redacted_removes_every_signature_and_keeps_the_rest() -> None:
    signer = UrlSigner(b"key")
    path = signer.part_path(PartGrant("upload_a", 0, 1, 100, 100, EXPIRES))
    signature = _query(path)["signature"]
    shown = redacted("http://h" + path)
    assert signature not in shown
    assert shown.startswith("http://h/blobs/parts/upload_a/0/1?size=100")
    assert "signature=REDACTED" in shown
    assert redacted("/x?a=1&signature=s&b=2") == "/x?a=1&signature=REDACTED&b=2"
    assert redacted("/api/v1/tracesets?next=abc") == "/api/v1/tracesets?next=abc"
