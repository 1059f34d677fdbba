"""JWT access tokens (docs/api.md): keys the tests generate, a JWKS file (or URL), real HTTP.

Claims carry the tenant's name and workspace names (see ``tracestore.server.jwt_auth``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.idp import (
    EC_KEY,
    OTHER_RSA_KEY,
    RSA_KEY,
    claims,
    jwk,
    token,
    with_jwt_login,
    write_jwks,
)
from tests.support.tenancy import RANKS_256, UPLOAD_URL, tenant_id, upload_ready, workspace_id
from tracestore.server import db
from tracestore.server.app import create_app
from tracestore.server.jwt_auth import JwtVerifier
from tracestore.server.services import Services, build_services
from tracestore.server.settings import Settings

UNAUTHORIZED = "Invalid or missing authentication token"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(alg: str, secret: bytes | None = None) -> str:
    """A token PyJWT would refuse to make: ``alg: none``, or HMAC keyed with ``secret``."""
    signing_input = (
        f"{b64(json.dumps({'alg': alg, 'typ': 'JWT', 'kid': 'rsa-1'}).encode())}."
        + b64(json.dumps(claims()).encode())
    )
    signature = (
        b"" if secret is None else hmac.digest(secret, signing_input.encode(), hashlib.sha256)
    )
    return f"{signing_input}.{b64(signature)}"


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


@pytest.fixture
def jwks_path(tmp_path: Path) -> Path:
    return tmp_path / "jwks.json"


@pytest.fixture
def settings(settings: Settings, jwks_path: Path) -> Settings:
    """The shared settings (SQLite, or the PostgreSQL pass), with JWT login from a file."""
    return with_jwt_login(settings, jwks_path)


@pytest.fixture
def org(services: Services) -> dict[str, str]:
    """Tenant acme (workspaces ml, infra) and tenant globex (workspace research)."""
    acme, globex = tenant_id(services, "acme"), tenant_id(services, "globex")
    return {
        "acme": acme,
        "ml": workspace_id(services, acme, "ml"),
        "infra": workspace_id(services, acme, "infra"),
        "research": workspace_id(services, globex, "research"),
    }


def start(http: TestClient, auth: dict[str, str], workspace: str | None = None) -> int:
    """Start a supporting-only upload (into ``workspace``): the status code."""
    body: dict[str, Any] = {
        "name": "x",
        "files": [{"name": "a.txt", "size": 1, "role": "supporting"}],
    }
    if workspace is not None:
        body["workspaceId"] = workspace
    return int(http.post(UPLOAD_URL, json=body, headers=auth).status_code)


def refused(http: TestClient, auth: dict[str, str]) -> bool:
    response = http.get("/api/v1/tracesets/ts_none", headers=auth)
    if response.status_code != 401:
        return False
    return assert_error(response, 401, "UNAUTHORIZED")["message"] == UNAUTHORIZED


def user_row(services: Services, subject: str) -> tuple[db.User, set[str]]:
    with services.db.session(write=False) as session:
        user = session.scalar(select(db.User).where(db.User.external_subject == subject))
        assert user is not None
        members = set(
            session.scalars(
                select(db.Membership.workspace_id).where(db.Membership.user_id == user.id)
            )
        )
        return user, members


def test_build_services_wires_the_verifier(services: Services) -> None:
    assert isinstance(services.jwt_verifier, JwtVerifier)


@pytest.mark.parametrize(
    ("key", "alg", "kid"), [(RSA_KEY, "RS256", "rsa-1"), (EC_KEY, "ES256", "ec-1")]
)
def test_a_valid_token_logs_in_and_creates_the_user_just_in_time(
    http: TestClient, services: Services, org: dict[str, str], key: Any, alg: str, kid: str
) -> None:
    auth = bearer(token(key, alg, kid))

    assert start(http, auth) == 200
    assert start(http, auth, org["ml"]) == 200

    user, members = user_row(services, "alice@idp")
    assert (user.tenant_id, user.name, user.default_workspace_id) == (
        org["acme"],
        "Alice",
        org["ml"],
    )
    assert members == {org["ml"]}
    assert user.is_tenant_admin is False


BAD_TOKENS: dict[str, Callable[[], str]] = {
    "wrong key": lambda: token(OTHER_RSA_KEY),
    "wrong issuer": lambda: token(iss="https://evil.example.com/"),
    "wrong audience": lambda: token(aud="another-service"),
    "expired": lambda: token(exp=int(time.time()) - 3600),
    "not yet valid": lambda: token(nbf=int(time.time()) + 3600),
    "alg none": lambda: unsigned_token("none"),
    "HS256 keyed with the public key": lambda: unsigned_token(
        "HS256",
        RSA_KEY.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    ),
    "HS256 keyed with the JWK text": lambda: unsigned_token(
        "HS256", json.dumps(jwk(RSA_KEY.public_key(), "rsa-1")).encode()
    ),
    "RSA token naming the EC key": lambda: token(RSA_KEY, "RS256", "ec-1"),
    "unknown kid": lambda: token(kid="rsa-9"),
    "no kid with several keys": lambda: token(kid=None),
    "missing sub": lambda: token(sub=None),
    "missing tenant": lambda: token(tenant=None),
    "missing workspaces": lambda: token(workspaces=None),
    "workspaces not a list": lambda: token(workspaces="ml"),
    "missing exp": lambda: token(exp=None),
    "missing aud": lambda: token(aud=None),
    "admin claim not a boolean": lambda: token(tenant_admin="true"),
    "unknown tenant": lambda: token(tenant="initech"),
    "tampered payload": lambda: ".".join(
        [
            token().split(".")[0],
            b64(json.dumps(claims(sub="mallory")).encode()),
            token().split(".")[2],
        ]
    ),
    "not a JWT": lambda: "abc.def.ghi",
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_bad_tokens_are_refused_with_401(
    http: TestClient, services: Services, org: dict[str, str], case: str
) -> None:
    assert refused(http, bearer(BAD_TOKENS[case]()))
    with services.db.session(write=False) as session:
        assert session.scalar(select(db.User).where(db.User.external_subject.is_not(None))) is None


def test_api_tokens_still_work_beside_jwts(http: TestClient) -> None:
    assert http.get("/api/v1/tracesets/ts_none").status_code == 404


def test_expiry_follows_the_service_clock(
    http: TestClient, org: dict[str, str], clock: FakeClock
) -> None:
    auth = bearer(token())
    assert start(http, auth) == 200

    clock.advance(minutes=11)

    assert refused(http, auth)


def test_memberships_follow_the_claim_on_every_login(
    http: TestClient, services: Services, org: dict[str, str]
) -> None:
    assert start(http, bearer(token(workspaces=["ml", "nope", "research"]))) == 200
    assert user_row(services, "alice@idp")[1] == {org["ml"]}  # unknown and foreign names ignored

    second = bearer(token(workspaces=["infra"], name="Alice B."))

    assert start(http, second, org["ml"]) == 403
    assert start(http, second, org["infra"]) == 200
    assert start(http, second) == 200  # the default workspace moved to infra
    user, members = user_row(services, "alice@idp")
    assert members == {org["infra"]}
    assert (user.default_workspace_id, user.name) == (org["infra"], "Alice B.")

    none = bearer(token(workspaces=[]))
    assert start(http, none) == 400
    assert user_row(services, "alice@idp")[1] == set()


def test_the_admin_claim_makes_a_tenant_admin_each_login(
    http: TestClient, org: dict[str, str]
) -> None:
    admin = bearer(token(tenant_admin=True))
    ts = upload_ready(http, RANKS_256, headers=admin)
    promote = f"/api/v1/tracesets/{ts['id']}/promote"
    assert http.post(promote, json={}, headers=admin).status_code == 200

    demoted = bearer(token(tenant_admin=False))
    assert http.post(promote, json={"target": "public"}, headers=demoted).status_code == 403

    assert http.post(promote, json={"target": "public"}, headers=admin).status_code == 200


def test_a_subject_cannot_move_to_another_tenant(http: TestClient, org: dict[str, str]) -> None:
    assert start(http, bearer(token())) == 200

    assert refused(http, bearer(token(tenant="globex", workspaces=["research"])))


def test_a_key_added_to_the_jwks_file_is_picked_up(
    http: TestClient, org: dict[str, str], jwks_path: Path
) -> None:
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert refused(http, bearer(token(rotated, kid="rsa-2")))

    write_jwks(jwks_path, (RSA_KEY, "rsa-1"), (rotated, "rsa-2"))

    assert start(http, bearer(token(rotated, kid="rsa-2"))) == 200


def test_settings_need_issuer_and_audience(tmp_path: Path, jwks_path: Path) -> None:
    with pytest.raises(ValueError, match="TRACESTORE_JWT_ISSUER"):
        build_services(Settings(data_dir=tmp_path / "d", jwks_file=jwks_path))


def test_algorithms_outside_the_settings_are_refused(settings: Settings, clock: FakeClock) -> None:
    verifier = JwtVerifier(settings.model_copy(update={"jwt_algorithms": ["RS256"]}))

    assert verifier.verified_claims(token(), clock())["sub"] == "alice@idp"
    with pytest.raises(Exception, match=UNAUTHORIZED):
        verifier.verified_claims(token(EC_KEY, "ES256", "ec-1"), clock())


# --- JWKS served over HTTP -------------------------------------------------------------


class JwksServer:
    """A real HTTP server answering the JWKS it holds, counting fetches."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {"keys": [jwk(RSA_KEY.public_key(), "rsa-1")]}
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.fetches += 1
                body = json.dumps(outer.document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks.json"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def jwks_server() -> Iterator[JwksServer]:
    server = JwksServer()
    yield server
    server.close()


def test_jwks_url_is_cached_and_refetched_for_an_unknown_kid(
    settings: Settings, jwks_server: JwksServer, clock: FakeClock
) -> None:
    settings = settings.model_copy(update={"jwks_url": jwks_server.url, "jwks_file": None})
    services = build_services(settings, clock=clock)
    assert jwks_server.fetches == 0  # fetched on first use, not at start
    services.jwt_verifier = JwtVerifier(settings, refresh_cooldown=0)
    acme = tenant_id(services, "acme")
    workspace_id(services, acme, "ml")
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    try:
        with TestClient(create_app(services=services), raise_server_exceptions=False) as http:
            assert start(http, bearer(token())) == 200
            assert start(http, bearer(token())) == 200
            assert jwks_server.fetches == 1

            jwks_server.document["keys"].append(jwk(rotated.public_key(), "rsa-2"))
            assert start(http, bearer(token(rotated, kid="rsa-2"))) == 200
            assert jwks_server.fetches == 2

            assert refused(http, bearer(token(OTHER_RSA_KEY, kid="rsa-3")))
    finally:
        services.close()


def test_an_unreachable_jwks_url_answers_503(settings: Settings, clock: FakeClock) -> None:
    settings = settings.model_copy(
        update={"jwks_url": "http://127.0.0.1:9/jwks.json", "jwks_file": None}
    )
    services = build_services(settings, clock=clock)
    try:
        with TestClient(create_app(services=services), raise_server_exceptions=False) as http:
            response = http.get("/api/v1/tracesets/ts_none", headers=bearer(token()))
        assert_error(response, 503, "SERVICE_UNAVAILABLE")
    finally:
        services.close()


def test_concurrent_first_logins_create_one_user(
    http: TestClient, services: Services, org: dict[str, str]
) -> None:
    auth = bearer(token(sub="bob@idp", workspaces=["ml", "infra"]))

    with ThreadPoolExecutor(max_workers=4) as pool:
        statuses = list(pool.map(lambda _: start(http, auth), range(4)))

    assert statuses == [200] * 4
    with services.db.session(write=False) as session:
        users = session.scalars(select(db.User).where(db.User.external_subject == "bob@idp")).all()
    assert len(users) == 1
    assert user_row(services, "bob@idp")[1] == {org["ml"], org["infra"]}
