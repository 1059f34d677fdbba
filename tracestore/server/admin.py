"""Use cases of the ``tracestore tenant|user|token|workspace`` commands: create and list
tenants, create, list and disable users, issue, list and revoke API tokens, create and list
workspaces. They act for the operator of the data directory; where no tenant is named, the
bootstrap admin's. Tenants, users and workspaces are named by id or by name."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from tracestore import schemas
from tracestore.errors import NotFound, ValidationError
from tracestore.server import auth, db
from tracestore.server.services import Services

DEFAULT_WORKSPACE = "default"


def first_admin_user(session: Session) -> db.User:
    """The tenant admin created first (the bootstrap admin), whom admin commands act for."""
    user = session.scalars(
        select(db.User).where(db.User.is_tenant_admin).order_by(db.User.created_at).limit(1)
    ).first()
    if user is None:
        raise NotFound("No admin user exists")
    return user


def find_tenant(session: Session, ref: str | None) -> db.Tenant:
    """The tenant with id or name ``ref``; None: the bootstrap admin's."""
    if ref is None:
        tenant = session.get(db.Tenant, first_admin_user(session).tenant_id)
    else:
        tenant = session.get(db.Tenant, ref) or session.scalar(
            select(db.Tenant).where(db.Tenant.name == ref)
        )
    if tenant is None:
        raise NotFound(f"Tenant '{ref}' not found; see `tracestore tenant list`")
    return tenant


def find_user(session: Session, ref: str, tenant: str | None = None) -> db.User:
    """The user with id ``ref``, else the one named ``ref`` (in ``tenant`` when given);
    ValidationError when the name is taken in several tenants."""
    user = session.get(db.User, ref)
    if user is not None and (tenant is None or user.tenant_id == find_tenant(session, tenant).id):
        return user
    query = select(db.User).where(db.User.name == ref).order_by(db.User.created_at)
    if tenant is not None:
        query = query.where(db.User.tenant_id == find_tenant(session, tenant).id)
    found = session.scalars(query).all()
    if not found:
        raise NotFound(f"User '{ref}' not found; see `tracestore user list`")
    if len(found) > 1:
        ids = ", ".join(u.id for u in found)
        raise ValidationError(f"Several users are named {ref!r} ({ids}); pass --tenant or an id")
    return found[0]


def _find_workspace(session: Session, tenant: db.Tenant, ref: str) -> db.Workspace:
    workspace = session.get(db.Workspace, ref)
    if workspace is None or workspace.tenant_id != tenant.id:
        workspace = session.scalar(
            select(db.Workspace).where(
                db.Workspace.tenant_id == tenant.id, db.Workspace.name == ref
            )
        )
    if workspace is None:
        raise NotFound(f"Workspace '{ref}' not found in tenant '{tenant.name}'")
    return workspace


def _check_name(kind: str, name: str) -> None:
    if not name.strip() or len(name) > 255:
        raise ValidationError(f"{kind} name must be 1–255 characters, not only spaces")


# --- tenants ---


def create_tenant(services: Services, name: str) -> schemas.Tenant:
    """A new tenant with one workspace, ``default``, for its users to start in."""
    _check_name("Tenant", name)
    now = services.now()
    with services.db.session() as session:
        if session.scalar(select(db.Tenant.id).where(db.Tenant.name == name)) is not None:
            raise ValidationError(f"Tenant {name!r} already exists")
        tenant = auth.create_tenant(session, name, now)
        session.flush()
        auth.create_workspace(session, tenant.id, DEFAULT_WORKSPACE, now)
        session.flush()
        return _tenant_view(session, tenant)


def list_tenants(services: Services) -> list[schemas.Tenant]:
    """Every tenant with its workspaces, oldest first."""
    with services.db.session(write=False) as session:
        rows = session.scalars(select(db.Tenant).order_by(db.Tenant.created_at)).all()
        return [_tenant_view(session, row) for row in rows]


def _tenant_view(session: Session, tenant: db.Tenant) -> schemas.Tenant:
    workspaces = session.scalars(
        select(db.Workspace)
        .where(db.Workspace.tenant_id == tenant.id)
        .order_by(db.Workspace.created_at, db.Workspace.name)
    ).all()
    return schemas.Tenant(
        id=tenant.id,
        name=tenant.name,
        created_at=tenant.created_at,
        workspaces=[_workspace_view(w) for w in workspaces],
    )


# --- users ---


def create_user(
    services: Services,
    name: str,
    *,
    tenant: str | None = None,
    workspaces: Sequence[str] = (),
    tenant_admin: bool = False,
) -> schemas.User:
    """A new user of ``tenant`` (default: the admin's), member of ``workspaces`` (default:
    the tenant's first workspace), the first of them its default."""
    _check_name("User", name)
    with services.db.session() as session:
        owner = find_tenant(session, tenant)
        taken = select(db.User.id).where(db.User.tenant_id == owner.id, db.User.name == name)
        if session.scalar(taken) is not None:
            raise ValidationError(f"User {name!r} already exists in tenant '{owner.name}'")
        if workspaces:
            joined = [_find_workspace(session, owner, ref).id for ref in workspaces]
        else:
            first = session.scalar(
                select(db.Workspace.id)
                .where(db.Workspace.tenant_id == owner.id)
                .order_by(db.Workspace.created_at)
                .limit(1)
            )
            joined = [first] if first is not None else []
        user = auth.create_user(
            session,
            owner.id,
            name,
            services.now(),
            workspace_ids=dict.fromkeys(joined),
            is_tenant_admin=tenant_admin,
        )
        session.flush()
        return _user_view(session, user)


def list_users(services: Services, *, tenant: str | None = None) -> list[schemas.User]:
    """Every user (of ``tenant`` when given), oldest first."""
    with services.db.session(write=False) as session:
        query = select(db.User).order_by(db.User.created_at)
        if tenant is not None:
            query = query.where(db.User.tenant_id == find_tenant(session, tenant).id)
        return [_user_view(session, row) for row in session.scalars(query).all()]


def disable_user(services: Services, user: str, *, tenant: str | None = None) -> schemas.User:
    """Disable a user: their API tokens and JWTs are refused from the next request on.
    What they uploaded stays. The bootstrap admin cannot be disabled (the commands act
    for it)."""
    with services.db.session() as session:
        row = find_user(session, user, tenant)
        if row.id == first_admin_user(session).id:
            raise ValidationError(
                f"User '{row.name}' is the bootstrap admin the admin commands act for; "
                "it cannot be disabled"
            )
        if row.disabled_at is None:
            row.disabled_at = services.now()
        disabled = _user_view(session, row)
    services.token_cache.clear()  # refused from the next request on, in this process too
    return disabled


def _user_view(session: Session, user: db.User) -> schemas.User:
    names = session.scalars(
        select(db.Workspace.name)
        .join(db.Membership, db.Membership.workspace_id == db.Workspace.id)
        .where(db.Membership.user_id == user.id)
        .order_by(db.Workspace.created_at, db.Workspace.name)
    ).all()
    tenant = session.get(db.Tenant, user.tenant_id)
    return schemas.User(
        id=user.id,
        name=user.name,
        tenant_id=user.tenant_id,
        tenant_name=tenant.name if tenant else "",
        workspaces=list(names),
        is_tenant_admin=user.is_tenant_admin,
        created_at=user.created_at,
        disabled_at=user.disabled_at,
    )


# --- tokens ---


def create_token(
    services: Services,
    *,
    user: str | None = None,
    tenant: str | None = None,
    name: str = "cli",
    expires_in_days: int | None = None,
) -> schemas.NewApiToken:
    """Issue an API token for ``user`` (id or name, in ``tenant`` when given; default: the
    admin user); its secret is in the answer only."""
    now = services.now()
    expires = now + timedelta(days=expires_in_days) if expires_in_days else None
    with services.db.session() as session:
        owner = find_user(session, user, tenant) if user is not None else first_admin_user(session)
        if owner.disabled_at is not None:
            raise ValidationError(f"User '{owner.name}' is disabled; it cannot get a token")
        issued = auth.issue_token(session, owner.id, name, now, expires)
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
    services.token_cache.clear()


def create_workspace(
    services: Services, name: str, members: Sequence[str] = (), *, tenant: str | None = None
) -> schemas.Workspace:
    """A new workspace in ``tenant`` (default: the admin's, and then the admin is in it)
    with ``members`` (user ids or names of that tenant) in it."""
    with services.db.session() as session:
        admin = first_admin_user(session)
        owner = find_tenant(session, tenant)
        created = auth.create_workspace(session, owner.id, name, services.now())
        session.flush()
        users = [find_user(session, ref, owner.id) for ref in members]
        if owner.id == admin.tenant_id:
            users.insert(0, admin)
        for user in users:
            auth.add_member(session, user.id, created.id)
        workspace = _workspace_view(created)
    services.token_cache.clear()  # its members' next requests see it
    return workspace


def list_workspaces(services: Services) -> list[schemas.Workspace]:
    """Every workspace, oldest first."""
    with services.db.session(write=False) as session:
        rows = session.scalars(select(db.Workspace).order_by(db.Workspace.created_at)).all()
        return [_workspace_view(row) for row in rows]


def _workspace_view(row: db.Workspace) -> schemas.Workspace:
    return schemas.Workspace(id=row.id, name=row.name, tenant_id=row.tenant_id)
