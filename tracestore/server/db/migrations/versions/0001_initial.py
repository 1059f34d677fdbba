"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 09:01:06.285170
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("unreferenced_since", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("sha256"),
    )
    with op.batch_alter_table("blobs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_blobs_unreferenced_since"), ["unreferenced_since"], unique=False
        )

    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "workspaces",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "name", name="uq_workspaces_tenant_name"),
    )
    with op.batch_alter_table("workspaces", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_workspaces_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "users",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("external_subject", sa.String(length=255), nullable=True),
        sa.Column("is_tenant_admin", sa.Boolean(), nullable=False),
        sa.Column("default_workspace_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["default_workspace_id"],
            ["workspaces.id"],
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("external_subject"),
    )
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_users_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_user_id"), ["user_id"], unique=False)

    op.create_table(
        "memberships",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
        ),
        sa.PrimaryKeyConstraint("user_id", "workspace_id"),
    )
    op.create_table(
        "tracesets",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("scope", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ttl_days", sa.Integer(), nullable=False),
        sa.Column("rank_count", sa.BigInteger(), nullable=True),
        sa.Column("total_size", sa.BigInteger(), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=80), nullable=True),
        sa.Column("metadata_text", sa.Text(), nullable=True),
        sa.Column(
            "workload_metadata",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=True,
        ),
        sa.Column("inspection", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["created_by"],
            ["users.id"],
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("tracesets", schema=None) as batch_op:
        batch_op.create_index("ix_tracesets_status_expires", ["status", "expires_at"], unique=False)
        batch_op.create_index("ix_tracesets_tenant_scope", ["tenant_id", "scope"], unique=False)
        batch_op.create_index(
            "ix_tracesets_workspace_created", ["workspace_id", "created_at", "id"], unique=False
        )

    op.create_table(
        "traceset_files",
        sa.Column("traceset_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=1024), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content_type", sa.String(length=255), nullable=True),
        sa.Column("expected_sha256", sa.String(length=64), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("staging_handle", sa.String(length=1024), nullable=True),
        sa.Column("metadata_status", sa.String(length=16), nullable=False),
        sa.Column("metadata_reason", sa.Text(), nullable=True),
        sa.Column("inspection", sa.JSON(), nullable=True),
        sa.Column("rank_start", sa.BigInteger(), nullable=True),
        sa.Column("rank_end", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["sha256"],
            ["blobs.sha256"],
        ),
        sa.ForeignKeyConstraint(
            ["traceset_id"],
            ["tracesets.id"],
        ),
        sa.PrimaryKeyConstraint("traceset_id", "position"),
        sa.UniqueConstraint("traceset_id", "name", name="uq_traceset_files_name"),
    )
    with op.batch_alter_table("traceset_files", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_traceset_files_sha256"), ["sha256"], unique=False)

    op.create_table(
        "upload_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("traceset_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("part_size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(length=64), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["traceset_id"],
            ["tracesets.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("traceset_id"),
    )
    with op.batch_alter_table("upload_sessions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_upload_sessions_state_expires", ["state", "expires_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("upload_sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_upload_sessions_state_expires")

    op.drop_table("upload_sessions")
    with op.batch_alter_table("traceset_files", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_traceset_files_sha256"))

    op.drop_table("traceset_files")
    with op.batch_alter_table("tracesets", schema=None) as batch_op:
        batch_op.drop_index("ix_tracesets_workspace_created")
        batch_op.drop_index("ix_tracesets_tenant_scope")
        batch_op.drop_index("ix_tracesets_status_expires")

    op.drop_table("tracesets")
    op.drop_table("memberships")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_user_id"))

    op.drop_table("api_tokens")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_users_tenant_id"))

    op.drop_table("users")
    with op.batch_alter_table("workspaces", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workspaces_tenant_id"))

    op.drop_table("workspaces")
    op.drop_table("tenants")
    with op.batch_alter_table("blobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_blobs_unreferenced_since"))

    op.drop_table("blobs")
