"""The base of the presigned URLs the service hands out, through the real app: the
request's own scheme and Host, X-Forwarded-* only from a trusted proxy, and
TRACESTORE_PUBLIC_URL over both."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.uploading import request_upload
from tracestore.server.app import create_app
from tracestore.server.auth import bootstrap
from tracestore.server.services import build_services
from tracestore.server.settings import Settings

FILES = {"config.yaml": (b"x" * 10, "supporting")}
AppFor = Callable[..., TestClient]
FORWARDED = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "traces.example.org"}


@pytest.fixture
def app_for(settings: Settings, clock: FakeClock) -> Iterator[AppFor]:
    """``app_for(peer, **settings)``: a client on the real app whose requests come from
    ``peer``, built on ``settings`` changed as given."""
    opened: list[TestClient] = []

    def build(peer: str, **changes: object) -> TestClient:
        changed = Settings(**{**settings.model_dump(), **changes})
        services = build_services(changed, clock=clock)
        bootstrap(services.db, changed.data_dir, clock())
        token = (changed.data_dir / "admin-token").read_text().strip()
        client = TestClient(create_app(services=services), client=(peer, 40000))
        client.__enter__()
        client.headers["Authorization"] = f"Bearer {token}"
        opened.append(client)
        return client

    yield build
    for client in opened:
        client.__exit__(None, None, None)


def _part_url(http: TestClient, **headers: str) -> str:
    http.headers.update(headers)
    answer = request_upload(http, FILES)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["files"][0]["parts"][0]["url"])


def test_urls_follow_the_host_the_client_used(app_for: AppFor) -> None:
    http = app_for("10.1.2.3")
    assert _part_url(http, Host="traces.lan:8123").startswith("http://traces.lan:8123/blobs/")


def test_forwarded_headers_are_ignored_from_an_untrusted_peer(app_for: AppFor) -> None:
    http = app_for("10.1.2.3", trusted_proxies=["10.9.0.0/16"])
    assert _part_url(http, **FORWARDED).startswith("http://testserver/blobs/")


def test_forwarded_headers_are_believed_from_a_trusted_proxy(app_for: AppFor) -> None:
    http = app_for("10.9.4.5", trusted_proxies=["10.9.0.0/16"])
    assert _part_url(http, **FORWARDED).startswith("https://traces.example.org/blobs/")


def test_the_public_url_setting_wins(app_for: AppFor) -> None:
    http = app_for("10.9.4.5", trusted_proxies=["10.9.0.0/16"], public_url="https://ts.corp/")
    assert _part_url(http, **FORWARDED).startswith("https://ts.corp/blobs/")


def test_a_malformed_forwarded_host_is_a_400(app_for: AppFor) -> None:
    http = app_for("10.9.4.5", trusted_proxies=["10.9.0.0/16"])
    http.headers["X-Forwarded-Host"] = "a b/c"
    answer = request_upload(http, FILES)
    assert "X-Forwarded-Host" in assert_error(answer, 400, "VALIDATION_ERROR")["message"]
