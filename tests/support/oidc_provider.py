"""A small OpenID Connect identity provider for the page's login tests, on a port of its own:
``/authorize`` approves at once (or refuses, when told to) and sends the browser back with a
code; ``/token`` trades the code for a JWT access token signed by tests/support/idp.py's key, only
with the PKCE verifier whose S256 challenge came with the code (RFC 7636). One request a
connection (HTTP/1.0), so Chromium never sends one again on its own (test_upload_recovery.py
says when it does)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.support.idp import AUDIENCE, ISSUER, RSA_KEY, token, write_jwks

CLIENT_ID = "tracestore-web"


@dataclass
class Provider:
    url: str
    jwks: Path
    claims: dict[str, Any] = field(default_factory=dict)  # of the tokens it gives
    refuse: str | None = None  # an error /authorize answers instead of a code
    cut: bool = False  # /token takes the code, then closes the connection without an answer
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    exchanges: list[dict[str, str]] = field(default_factory=list)  # /token forms received

    def service_env(self) -> dict[str, str]:
        """The settings of a ``tracestore serve`` whose page signs in here."""
        return {
            "TRACESTORE_JWKS_FILE": str(self.jwks),
            "TRACESTORE_JWT_ISSUER": ISSUER,
            "TRACESTORE_JWT_AUDIENCE": AUDIENCE,
            "TRACESTORE_OIDC_AUTHORIZATION_URL": f"{self.url}/authorize",
            "TRACESTORE_OIDC_TOKEN_URL": f"{self.url}/token",
            "TRACESTORE_OIDC_CLIENT_ID": CLIENT_ID,
            "TRACESTORE_OIDC_SCOPE": "openid profile",
        }


def s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: dict[str, Any], origin: str | None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if origin:
                self.send_header("Access-Control-Allow-Origin", origin)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            if parts.path != "/authorize":
                self._answer(404, {"error": "not_found"}, None)
                return
            back = query.get("redirect_uri", "")
            if (
                query.get("response_type") != "code"
                or query.get("client_id") != CLIENT_ID
                or query.get("code_challenge_method") != "S256"
                or not query.get("code_challenge")
                or not back.startswith("http://127.0.0.1:")
            ):
                self._answer(400, {"error": "invalid_request", "got": query}, None)
                return
            if provider.refuse:
                answer = {"error": provider.refuse, "error_description": "The user said no"}
            else:
                code = secrets.token_urlsafe(16)
                provider.codes[code] = query
                answer = {"code": code}
            self.send_response(302)
            self.send_header("Location", f"{back}?{urlencode({**answer, 'state': query['state']})}")
            self.end_headers()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            provider.exchanges.append(form)
            origin = self.headers.get("Origin")
            asked = provider.codes.pop(form.get("code", ""), None)  # a code works once
            if provider.cut:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if (
                urlsplit(self.path).path != "/token"
                or form.get("grant_type") != "authorization_code"
                or asked is None
                or form.get("client_id") != asked["client_id"]
                or form.get("redirect_uri") != asked["redirect_uri"]
                or s256(form.get("code_verifier", "")) != asked["code_challenge"]
            ):
                self._answer(400, {"error": "invalid_grant"}, origin)
                return
            access = token(**provider.claims)
            self._answer(
                200, {"access_token": access, "token_type": "Bearer", "expires_in": 600}, origin
            )

    return Handler


@contextmanager
def identity_provider(directory: Path, **claims: Any) -> Iterator[Provider]:
    jwks = directory / "jwks.json"
    write_jwks(jwks, (RSA_KEY, "rsa-1"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Provider("", jwks)))
    provider = Provider(f"http://127.0.0.1:{server.server_address[1]}", jwks, claims)
    server.RequestHandlerClass = _handler(provider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
