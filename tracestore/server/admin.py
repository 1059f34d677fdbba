"""Use cases of the ``tracestore token|workspace`` commands: issue, list and revoke API
tokens, create and list workspaces, acting as the tenant admin by default."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from tracestore import schemas
from tracestore.errors import NotFound
from tracestore.server import auth, db
from tracestore.server.services import Services


def first_admin_user(session: Session) -> db.User:
    """The tenant admin created first (the bootstrap admin), whom admin commands act for."""
    user = session.scalars(
        select(db.User).where(db.User.is_tenant_admin).order_by(db.User.created_at).limit(1)
    ).first()
    if user is None:
        raise NotFound("No admin user exists")
    return user


def create_token(
    services: Services,
    *,
    user_id: str | None = None,
    name: str = "cli",
    expires_in_days: int | None = None,
) -> schemas.NewApiToken:
    """Issue an API token for ``user_id`` (default: the admin user); its secret is in the
    answer only."""
    now = services.now()
    expires = now + timedelta(days=expires_in_days) if expires_in_days else None
    with services.db.session() as session:
        owner = user_id if user_id is not None else first_admin_user(session).id
        issued = auth.issue_token(session, owner, name, now, expires)
    return schemas.NewApiToken(
        id=issued.id,
        token=issued.token,
        user_id=issued.user_id,
        name=issued.name,
        expires_at=issued.expires_at,
    )


def list_tokens(services: Services) -> list[schemas.ApiToken]:
    """Every API token, oldest first (never their secret)."""
    with services.db.session(write=False) as session:
        rows = session.scalars(select(db.ApiToken).order_by(db.ApiToken.created_at)).all()
        return [
            schemas.ApiToken(
                id=row.id,
                name=row.name,
                user_id=row.user_id,
                created_at=row.created_at,
                expires_at=row.expires_at,
                revoked_at=row.revoked_at,
            )
            for row in rows
        ]


def revoke_token(services: Services, token_id: str) -> None:
    """Revoke the API token ``token_id`` (NotFound when there is none)."""
    with services.db.session() as session:
        auth.revoke_token(session, token_id, services.now())


def create_workspace(
    services: Services, name: str, members: Sequence[str] = ()
) -> schemas.Workspace:
    """A new workspace in the admin's tenant, with the admin and ``members`` in it."""
    with services.db.session() as session:
        admin = first_admin_user(session)
        created = auth.create_workspace(session, admin.tenant_id, name, services.now())
        session.flush()
        for user_id in (admin.id, *members):
            auth.add_member(session, user_id, created.id)
        return _workspace_view(created)


def list_workspaces(services: Services) -> list[schemas.Workspace]:
    """Every workspace, oldest first."""
    with services.db.session(write=False) as session:
        rows = session.scalars(select(db.Workspace).order_by(db.Workspace.created_at)).all()
        return [_workspace_view(row) for row in rows]


def _workspace_view(row: db.Workspace) -> schemas.Workspace:
    return schemas.Workspace(id=row.id, name=row.name, tenant_id=row.tenant_id)
