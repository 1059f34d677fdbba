"""A fake identity provider for tests: generated keys, a JWKS, signed access tokens."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tracestore.server.settings import Settings

ISSUER = "https://login.example.com/"
AUDIENCE = "tracestore"

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def jwk(key: Any, kid: str) -> dict[str, Any]:
    algorithm = RSAAlgorithm if isinstance(key, rsa.RSAPublicKey) else ECAlgorithm
    return {**algorithm.to_jwk(key, as_dict=True), "kid": kid, "use": "sig"}


def write_jwks(path: Path, *keys: tuple[Any, str]) -> None:
    path.write_text(json.dumps({"keys": [jwk(key.public_key(), kid) for key, kid in keys]}))


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice@idp",
        "name": "Alice",
        "tenant": "acme",
        "workspaces": ["ml"],
        "iat": now,
        "exp": now + 600,
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def token(key: Any = RSA_KEY, alg: str = "RS256", kid: str | None = "rsa-1", **changes: Any) -> str:
    headers = {"kid": kid} if kid else None
    return jwt.encode(claims(**changes), key, algorithm=alg, headers=headers)


def with_jwt_login(settings: Settings, jwks_path: Path) -> Settings:
    """``settings`` that also accept tokens signed by the keys of the JWKS at ``jwks_path``."""
    write_jwks(jwks_path, (RSA_KEY, "rsa-1"), (EC_KEY, "ec-1"))
    return settings.model_copy(
        update={"jwks_file": jwks_path, "jwt_issuer": ISSUER, "jwt_audience": AUDIENCE}
    )
