"""What the admin commands print with --json (tracestore tenant|user|token|workspace): tenants,
users, workspaces and API tokens."""

from __future__ import annotations

from tracestore.schemas.wire import Timestamp, WireModel


class NewApiToken(WireModel):
    """An API token just issued; ``token`` is its secret, shown this once."""

    id: str
    token: str
    user_id: str
    name: str
    expires_at: Timestamp | None


class ApiToken(WireModel):
    """An API token as listed: never its secret."""

    id: str
    name: str
    user_id: str
    created_at: Timestamp
    expires_at: Timestamp | None
    revoked_at: Timestamp | None


class Workspace(WireModel):
    id: str
    name: str
    tenant_id: str


class Tenant(WireModel):
    """A tenant: a group of users and workspaces that see each other's tenant-scope data."""

    id: str
    name: str
    created_at: Timestamp
    workspaces: list[Workspace]


class User(WireModel):
    """A user as the admin commands show it (``workspaces`` are names in its tenant)."""

    id: str
    name: str
    tenant_id: str
    tenant_name: str
    workspaces: list[str]
    is_tenant_admin: bool
    created_at: Timestamp
    disabled_at: Timestamp | None
