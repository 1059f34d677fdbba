"""Who is calling, and what they may see: API tokens, JWTs, visibility.

API tokens are issued by the service and stored only as a SHA-256 hash. JWT access tokens
from an external OpenID Connect provider are verified by ``jwt_auth.JwtVerifier``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Row, bindparam, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tracestore.errors import Forbidden, NotFound, Unauthorized, ValidationError
from tracestore.server import db
from tracestore.server.db.database import Database, serialize
from tracestore.server.ids import new_id

TOKEN_PREFIX = "tst_"
UNAUTHORIZED_MESSAGE = "Invalid or missing authentication token"
FORBIDDEN_MESSAGE = "You do not have access to this resource"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    user_id: str
    tenant_id: str
    workspace_ids: frozenset[str]
    default_workspace_id: str | None
    is_tenant_admin: bool = False

    def can_see(self, traceset: db.Traceset | Row[Any]) -> bool:
        return self.may_see(traceset.tenant_id, traceset.workspace_id, traceset.scope)

    def may_see(self, tenant_id: str, workspace_id: str, scope: str) -> bool:
        """``can_see`` of a traceset's tenant, workspace and scope."""
        if scope == "public":
            return True
        if scope == "tenant":
            return tenant_id == self.tenant_id
        return workspace_id in self.workspace_ids

    def can_write(self, traceset: db.Traceset | Row[Any]) -> bool:
        return traceset.workspace_id in self.workspace_ids

    def can_edit(self, traceset: db.Traceset) -> bool:
        """Its uploader, or an admin of its tenant, may change its name, description, tags."""
        return self.may_edit(traceset.tenant_id, traceset.created_by)

    def may_edit(self, tenant_id: str, created_by: str) -> bool:
        """``can_edit`` of a traceset's tenant and uploader."""
        return created_by == self.user_id or (self.is_tenant_admin and tenant_id == self.tenant_id)

    def require_member(self, workspace_id: str) -> None:
        if workspace_id not in self.workspace_ids:
            raise Forbidden(FORBIDDEN_MESSAGE)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def principal_for_user(session: Session, user: db.User) -> Principal:
    """The user as a caller; Unauthorized when the user is disabled."""
    if user.disabled_at is not None:
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    workspaces = session.scalars(
        select(db.Membership.workspace_id).where(db.Membership.user_id == user.id)
    ).all()
    return Principal(
        user_id=user.id,
        tenant_id=user.tenant_id,
        workspace_ids=frozenset(workspaces),
        default_workspace_id=user.default_workspace_id,
        is_tenant_admin=user.is_tenant_admin,
    )


# Every request runs these two: Core selects of just what a Principal needs (an ORM load of
# the token and the user cost more than the rest of a GET).
_TOKEN_USER = (
    select(
        db.ApiToken.revoked_at,
        db.ApiToken.expires_at,
        db.User.id,
        db.User.tenant_id,
        db.User.default_workspace_id,
        db.User.is_tenant_admin,
        db.User.disabled_at,
    )
    .join(db.User, db.User.id == db.ApiToken.user_id)
    .where(db.ApiToken.token_hash == bindparam("token_hash"))
)
_WORKSPACES = select(db.Membership.workspace_id).where(
    db.Membership.user_id == bindparam("user_id")
)


def authenticate_api_token(
    session: Session, token: str, now: datetime, cache: TokenCache | None = None
) -> Principal:
    """The caller an API token names at ``now``, looked up; Unauthorized when it is unknown,
    revoked or expired, or its user is disabled. The caller found is put in ``cache`` (the
    request path asks the cache first, before it opens a session)."""
    token_hash = hash_token(token)
    connection = session.connection()
    row = connection.execute(_TOKEN_USER, {"token_hash": token_hash}).one_or_none()
    if row is None or row.revoked_at is not None or row.disabled_at is not None:
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    if row.expires_at is not None and row.expires_at <= now:
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    workspaces = connection.execute(_WORKSPACES, {"user_id": row.id}).scalars().all()
    principal = Principal(
        user_id=row.id,
        tenant_id=row.tenant_id,
        workspace_ids=frozenset(workspaces),
        default_workspace_id=row.default_workspace_id,
        is_tenant_admin=bool(row.is_tenant_admin),
    )
    if cache is not None:
        cache.put(token_hash, principal, row.expires_at)
    return principal


class TokenCache:
    """API tokens checked in the last ``seconds`` (TRACESTORE_TOKEN_CACHE_SECONDS), so that a
    request need not look its token and memberships up again: the two statements were a
    third of a GET's time. The bound on staleness: a token revoked, a user disabled or a
    membership granted by another process (the admin commands) takes effect in this one
    within ``seconds``; in this process, ``clear`` makes it immediate (every admin write
    calls it). A token's own expiry is checked on every use. 0 turns it off."""

    MAX_ENTRIES = 10_000  # more tokens than this in one window: start the window again

    def __init__(self, seconds: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._monotonic = monotonic  # a test's own clock: a slow machine cannot age an entry
        self._entries: dict[str, tuple[Principal, datetime | None, float]] = {}

    def get(self, token_hash: str, now: datetime) -> Principal | None:
        entry = self._entries.get(token_hash)
        if entry is None:
            return None
        principal, expires_at, until = entry
        if self._monotonic() >= until or (expires_at is not None and expires_at <= now):
            self._entries.pop(token_hash, None)
            return None
        return principal

    def put(self, token_hash: str, principal: Principal, expires_at: datetime | None) -> None:
        if self.seconds <= 0:
            return
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries.clear()
        self._entries[token_hash] = (principal, expires_at, self._monotonic() + self.seconds)

    def clear(self) -> None:
        self._entries.clear()


# --- administration: used by bootstrap and the `tracestore token|workspace` commands ---


@dataclass(frozen=True)
class IssuedToken:
    id: str
    token: str
    user_id: str
    name: str
    expires_at: datetime | None


def create_tenant(session: Session, name: str, now: datetime) -> db.Tenant:
    tenant = db.Tenant(id=new_id("tenant"), name=name, created_at=now)
    session.add(tenant)
    return tenant


def create_workspace(session: Session, tenant_id: str, name: str, now: datetime) -> db.Workspace:
    if not name or len(name) > 255:
        raise ValidationError("Workspace name must be 1–255 characters")
    exists = session.scalar(
        select(db.Workspace).where(db.Workspace.tenant_id == tenant_id, db.Workspace.name == name)
    )
    if exists is not None:
        raise ValidationError(f"Workspace {name!r} already exists in this tenant")
    workspace = db.Workspace(id=new_id("workspace"), tenant_id=tenant_id, name=name, created_at=now)
    session.add(workspace)
    return workspace


def create_user(
    session: Session,
    tenant_id: str,
    name: str,
    now: datetime,
    *,
    workspace_ids: Iterable[str] = (),
    is_tenant_admin: bool = False,
    external_subject: str | None = None,
) -> db.User:
    ids = list(workspace_ids)
    user = db.User(
        id=new_id("user"),
        tenant_id=tenant_id,
        name=name,
        external_subject=external_subject,
        is_tenant_admin=is_tenant_admin,
        default_workspace_id=ids[0] if ids else None,
        created_at=now,
    )
    session.add(user)
    session.flush()
    for workspace_id in ids:
        add_member(session, user.id, workspace_id)
    return user


def add_member(session: Session, user_id: str, workspace_id: str) -> None:
    user = session.get(db.User, user_id)
    workspace = session.get(db.Workspace, workspace_id)
    if user is None:
        raise NotFound(f"User '{user_id}' not found")
    if workspace is None or workspace.tenant_id != user.tenant_id:
        raise NotFound(f"Workspace '{workspace_id}' not found")
    if session.get(db.Membership, (user_id, workspace_id)) is None:
        session.add(db.Membership(user_id=user_id, workspace_id=workspace_id))
    if user.default_workspace_id is None:
        user.default_workspace_id = workspace_id


def issue_token(
    session: Session, user_id: str, name: str, now: datetime, expires_at: datetime | None = None
) -> IssuedToken:
    if session.get(db.User, user_id) is None:
        raise NotFound(f"User '{user_id}' not found")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = db.ApiToken(
        id=new_id("token"),
        user_id=user_id,
        name=name,
        token_hash=hash_token(token),
        created_at=now,
        expires_at=expires_at,
    )
    session.add(row)
    return IssuedToken(row.id, token, user_id, name, expires_at)


def revoke_token(session: Session, token_id: str, now: datetime) -> None:
    row = session.get(db.ApiToken, token_id)
    if row is None:
        raise NotFound(f"Token '{token_id}' not found")
    if row.revoked_at is None:
        row.revoked_at = now


ADMIN_TOKEN_FILE = "admin-token"


def bootstrap(database: Database, data_dir: Path, now: datetime) -> Path | None:
    """On an empty database, create the default tenant, workspace and admin user, and write
    the admin's API token to ``<data-dir>/admin-token`` (mode 0600). Returns that file's
    path when the admin was created now, else None: the token itself is the file's alone
    (never printed, never logged)."""
    try:
        with database.session() as session:
            serialize(session)  # N replicas starting at once: one bootstraps, the rest wait
            if session.scalar(select(db.Tenant.id).limit(1)) is not None:
                return None
            tenant = create_tenant(session, "default", now)
            session.flush()
            workspace = create_workspace(session, tenant.id, "default", now)
            session.flush()
            user = create_user(
                session, tenant.id, "admin", now, workspace_ids=[workspace.id], is_tenant_admin=True
            )
            issued = issue_token(session, user.id, "admin (bootstrap)", now)
    except IntegrityError:
        # Another process bootstrapped the same database first (tenant names are unique).
        return None
    path = data_dir / ADMIN_TOKEN_FILE
    write_private_file(path, issued.token + "\n")
    return path


def write_private_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    tmp.replace(path)
