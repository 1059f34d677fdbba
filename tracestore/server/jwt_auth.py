"""JWT access tokens from an external OpenID Connect / OAuth2 provider (docs/api.md).

A token is accepted when it is signed with an asymmetric algorithm of ``jwt_algorithms``
(RS256/ES256 family) by a key of the JWKS (``jwks_file`` or ``jwks_url``), names the
configured issuer and audience, and is within its ``exp`` (and ``nbf``) by the service clock.
Everything else (``alg: none``, HS256 signed with the public key, another key, a missing
claim) answers 401 ``Invalid or missing authentication token``; the reason goes to the log.

Claims are mapped by the names set in settings:

- ``jwt_user_claim`` (``sub``): the user's stable subject. The user is created on first login
  (just in time), keyed by it (``users.external_subject``).
- ``jwt_tenant_claim`` (``tenant``): the tenant's **name**. The tenant must exist.
- ``jwt_workspaces_claim`` (``workspaces``): a list of workspace **names** within that tenant
  (names, not ids: an identity provider knows group names, never tracestore's generated
  ids). Names that are no workspace of the tenant are ignored; a token never creates a
  workspace. On every login the user's memberships become exactly the named workspaces.
- ``jwt_admin_claim`` (``tenant_admin``): optional boolean; ``true`` makes a tenant admin.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt import PyJWK, PyJWKClient, PyJWKSet
from jwt.exceptions import PyJWKClientConnectionError
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tracestore.errors import ServiceUnavailable, Unauthorized
from tracestore.server import auth, db
from tracestore.server.db.database import Database
from tracestore.server.settings import Settings

log = logging.getLogger("tracestore.jwt")

LEEWAY_SECONDS = 30
JWKS_CACHE_SECONDS = 300
_CURVES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}
_NAME_CLAIMS = ("name", "preferred_username", "email")


def _refuse(reason: str) -> Unauthorized:
    log.info("JWT refused: %s", reason)
    return Unauthorized(auth.UNAUTHORIZED_MESSAGE)


class _KeySource(Protocol):
    def key_for(self, kid: str | None) -> PyJWK: ...


class _FileKeys:
    """A JWKS file, read at start and read again when a token names an unknown ``kid`` and
    the file has changed since (a key rotation)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._version: tuple[int, int, int] | None = None
        self._keys = self._load()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def _load(self) -> list[PyJWK]:
        self._version = self._stat()
        try:
            data = json.loads(self.path.read_text())
            keys = PyJWKSet.from_dict(data).keys if isinstance(data, dict) else None
        except (OSError, ValueError, jwt.PyJWTError) as exc:
            raise ValueError(
                f"TRACESTORE_JWKS_FILE {self.path} is not a usable JWKS: {exc}"
            ) from None
        if keys is None:
            raise ValueError(f"TRACESTORE_JWKS_FILE {self.path} is not a JSON object")
        return keys

    def _find(self, kid: str | None) -> PyJWK | None:
        if kid is None:
            return self._keys[0] if len(self._keys) == 1 else None
        return next((k for k in self._keys if k.key_id == kid), None)

    def key_for(self, kid: str | None) -> PyJWK:
        with self._lock:
            key = self._find(kid)
            if key is None and self._stat() != self._version:
                try:
                    self._keys = self._load()
                except ValueError as exc:
                    log.warning("%s; keeping the keys read before", exc)
                key = self._find(kid)
        if key is None:
            raise _refuse(f"no key for kid {kid!r} in {self.path}")
        return key


class _UrlKeys:
    """A JWKS URL, cached; refetched (at most once per cooldown) on an unknown ``kid``."""

    def __init__(self, url: str, refresh_cooldown: float) -> None:
        self.client = PyJWKClient(
            url,
            cache_jwk_set=True,
            lifespan=JWKS_CACHE_SECONDS,
            timeout=10,
            cooldown_duration=refresh_cooldown,
        )

    def key_for(self, kid: str | None) -> PyJWK:
        if kid is None:
            raise _refuse("the token names no kid")
        try:
            return self.client.get_signing_key(kid)
        except PyJWKClientConnectionError as exc:
            log.warning("JWKS %s could not be fetched: %s", self.client.uri, exc)
            raise ServiceUnavailable(
                "The identity provider's signing keys could not be fetched"
            ) from None
        except jwt.PyJWTError as exc:
            raise _refuse(str(exc)) from None


def _key_fits(key: PyJWK, alg: str) -> bool:
    """The key is of the family ``alg`` names (and its curve), and allows ``alg``."""
    declared = key._jwk_data.get("alg")
    if declared is not None and declared != alg:
        return False
    if key.public_key_use not in (None, "sig"):
        return False
    if alg.startswith("RS"):
        return isinstance(key.key, rsa.RSAPublicKey)
    return isinstance(key.key, ec.EllipticCurvePublicKey) and key.key.curve.name == _CURVES[alg]


@dataclass(frozen=True)
class JwtIdentity:
    """What a verified token says about its holder."""

    subject: str
    name: str
    tenant: str
    workspaces: tuple[str, ...]
    is_tenant_admin: bool


class JwtVerifier:
    """Verifies JWT access tokens and maps them to a ``Principal`` (see the module)."""

    def __init__(self, settings: Settings, *, refresh_cooldown: float = 30.0) -> None:
        if not settings.jwt_issuer or not settings.jwt_audience:
            raise ValueError(
                "JWT login needs TRACESTORE_JWT_ISSUER and TRACESTORE_JWT_AUDIENCE "
                "besides TRACESTORE_JWKS_URL or TRACESTORE_JWKS_FILE"
            )
        self.issuer = settings.jwt_issuer
        self.audience = settings.jwt_audience
        self.algorithms = list(settings.jwt_algorithms)
        self.user_claim = settings.jwt_user_claim
        self.tenant_claim = settings.jwt_tenant_claim
        self.workspaces_claim = settings.jwt_workspaces_claim
        self.admin_claim = settings.jwt_admin_claim
        self._keys: _KeySource
        if settings.jwks_url:
            self._keys = _UrlKeys(settings.jwks_url, refresh_cooldown)
        elif settings.jwks_file:
            self._keys = _FileKeys(settings.jwks_file)
        else:
            raise ValueError("JWT login needs TRACESTORE_JWKS_URL or TRACESTORE_JWKS_FILE")

    @classmethod
    def from_settings(cls, settings: Settings) -> JwtVerifier | None:
        """A verifier when a JWKS is configured, else None (API tokens only)."""
        if not settings.jwks_url and not settings.jwks_file:
            return None
        return cls(settings)

    def verified_claims(self, token: str, now: datetime) -> dict[str, Any]:
        """The token's claims once signature, issuer, audience and time check out; or 401."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise _refuse(f"malformed token: {exc}") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise _refuse(f"algorithm {alg!r} is not one of {self.algorithms}")
        kid = header.get("kid")
        key = self._keys.key_for(kid if isinstance(kid, str) else None)
        if not _key_fits(key, alg):
            raise _refuse(f"key {key.key_id!r} does not fit algorithm {alg}")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                # Times are checked below against the service clock, not the wall clock.
                options={
                    "require": ["exp", "iss", "aud"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.PyJWTError as exc:
            raise _refuse(str(exc)) from None
        self._check_times(claims, now.timestamp())
        return claims

    @staticmethod
    def _check_times(claims: dict[str, Any], now: float) -> None:
        for name in ("exp", "nbf"):
            value = claims.get(name)
            if value is None and name == "nbf":
                continue
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise _refuse(f"claim {name} is not a number")
        if now >= claims["exp"] + LEEWAY_SECONDS:
            raise _refuse("the token has expired")
        if claims.get("nbf") is not None and now + LEEWAY_SECONDS < claims["nbf"]:
            raise _refuse("the token is not valid yet")

    def identity(self, claims: dict[str, Any]) -> JwtIdentity:
        """The holder named by the claims; 401 when a claim is missing or mistyped."""
        subject, tenant = claims.get(self.user_claim), claims.get(self.tenant_claim)
        workspaces = claims.get(self.workspaces_claim)
        admin = claims.get(self.admin_claim, False)
        if not isinstance(subject, str) or not subject or len(subject) > 255:
            raise _refuse(f"claim {self.user_claim!r} is missing or not a string")
        if not isinstance(tenant, str) or not tenant:
            raise _refuse(f"claim {self.tenant_claim!r} is missing or not a string")
        if not isinstance(workspaces, list) or not all(isinstance(w, str) for w in workspaces):
            raise _refuse(f"claim {self.workspaces_claim!r} is missing or not a list of names")
        if not isinstance(admin, bool):
            raise _refuse(f"claim {self.admin_claim!r} is not a boolean")
        name = next((claims[c] for c in _NAME_CLAIMS if isinstance(claims.get(c), str)), subject)
        return JwtIdentity(
            subject, str(name)[:255] or subject, tenant, tuple(dict.fromkeys(workspaces)), admin
        )

    def authenticate(self, database: Database, token: str, now: datetime) -> auth.Principal:
        """The caller a JWT names at ``now``: its user created or refreshed from the claims."""
        identity = self.identity(self.verified_claims(token, now))
        for attempt in range(2):
            try:
                with database.session(write=False) as session:
                    current = _unchanged_principal(session, identity)
                if current is not None:
                    return current
                with database.session() as session:
                    return _sync_user(session, identity, now)
            except IntegrityError:
                # A first login of the same subject raced this one; the next pass finds it.
                if attempt:
                    raise
        raise AssertionError("unreachable")


def _resolve(session: Session, identity: JwtIdentity) -> tuple[str, list[str]]:
    """The tenant's id and the ids of the named workspaces that exist in it (claim order)."""
    tenant_id = session.scalar(select(db.Tenant.id).where(db.Tenant.name == identity.tenant))
    if tenant_id is None:
        raise _refuse(f"tenant {identity.tenant!r} does not exist")
    rows = session.execute(
        select(db.Workspace.name, db.Workspace.id).where(
            db.Workspace.tenant_id == tenant_id, db.Workspace.name.in_(identity.workspaces)
        )
    ).all()
    by_name = {name: wid for name, wid in rows}
    return tenant_id, [by_name[n] for n in identity.workspaces if n in by_name]


def _user(session: Session, identity: JwtIdentity, tenant_id: str) -> db.User | None:
    user = session.scalar(select(db.User).where(db.User.external_subject == identity.subject))
    if user is not None and user.tenant_id != tenant_id:
        raise _refuse(f"subject {identity.subject!r} belongs to another tenant")
    return user


def _unchanged_principal(session: Session, identity: JwtIdentity) -> auth.Principal | None:
    """The principal when the stored user already matches the claims (no write needed)."""
    tenant_id, workspace_ids = _resolve(session, identity)
    user = _user(session, identity, tenant_id)
    if user is None:
        return None
    principal = auth.principal_for_user(session, user)
    default = principal.default_workspace_id
    if (
        principal.workspace_ids == frozenset(workspace_ids)
        and user.is_tenant_admin == identity.is_tenant_admin
        and user.name == identity.name
        and (default in workspace_ids or (default is None and not workspace_ids))
    ):
        return principal
    return None


def _sync_user(session: Session, identity: JwtIdentity, now: datetime) -> auth.Principal:
    """Create the user, or bring its name, admin flag and memberships in line with the claims."""
    tenant_id, workspace_ids = _resolve(session, identity)
    user = _user(session, identity, tenant_id)
    if user is None:
        user = auth.create_user(
            session,
            tenant_id,
            identity.name,
            now,
            workspace_ids=workspace_ids,
            is_tenant_admin=identity.is_tenant_admin,
            external_subject=identity.subject,
        )
    else:
        user.name = identity.name
        user.is_tenant_admin = identity.is_tenant_admin
        if user.default_workspace_id not in workspace_ids:
            user.default_workspace_id = workspace_ids[0] if workspace_ids else None
        session.execute(
            delete(db.Membership).where(
                db.Membership.user_id == user.id, db.Membership.workspace_id.not_in(workspace_ids)
            )
        )
        for workspace_id in workspace_ids:
            auth.add_member(session, user.id, workspace_id)
    session.flush()
    return auth.principal_for_user(session, user)
