"""indexes for listing and searching tracesets

The list answers each visibility branch (workspace scope per workspace, tenant scope per
tenant, public) from an index in (created_at, id) order. On PostgreSQL the workload filters'
containment test uses a GIN index over the metadata (jsonb_path_ops), and the name search a
trigram index when the pg_trgm extension is available.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _trigram_available(bind: sa.engine.Connection) -> bool:
    query = sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
    if bind.execute(query).scalar() is None:
        return False
    try:
        # A savepoint: without the privilege to create it, the search works unindexed.
        with bind.begin_nested():
            bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    except sa.exc.DBAPIError:
        return False
    return True


def upgrade() -> None:
    op.create_index("ix_tracesets_scope_created", "tracesets", ["scope", "created_at", "id"])
    op.create_index(
        "ix_tracesets_scope_tenant_created", "tracesets", ["scope", "tenant_id", "created_at", "id"]
    )
    for key in ("name", "total_size"):  # the other indexed sorts, per visibility arm
        op.create_index(f"ix_tracesets_workspace_{key}", "tracesets", ["workspace_id", key, "id"])
        op.create_index(f"ix_tracesets_scope_{key}", "tracesets", ["scope", key, "id"])
        op.create_index(
            f"ix_tracesets_scope_tenant_{key}", "tracesets", ["scope", "tenant_id", key, "id"]
        )
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    # A larger sample gives the metadata column a histogram of >= 100 documents, from which
    # the planner estimates how many rows a @> filter keeps (below that it guesses 1%, and
    # then prefers the GIN index for common values the ordered index walk serves better).
    # Planning tests @> on every histogram entry, so the target stays modest (1000: +10 ms).
    op.execute("ALTER TABLE tracesets ALTER COLUMN workload_metadata SET STATISTICS 250")
    op.create_index(
        "ix_tracesets_metadata_gin",
        "tracesets",
        ["workload_metadata"],
        postgresql_using="gin",
        postgresql_ops={"workload_metadata": "jsonb_path_ops"},
    )
    if _trigram_available(bind):
        op.create_index(
            "ix_tracesets_name_trgm",
            "tracesets",
            ["name"],
            postgresql_using="gin",
            postgresql_ops={"name": "gin_trgm_ops"},
        )


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_tracesets_name_trgm")
        op.drop_index("ix_tracesets_metadata_gin", table_name="tracesets")
    for key in ("name", "total_size"):
        for prefix in ("workspace", "scope", "scope_tenant"):
            op.drop_index(f"ix_tracesets_{prefix}_{key}", table_name="tracesets")
    op.drop_index("ix_tracesets_scope_tenant_created", table_name="tracesets")
    op.drop_index("ix_tracesets_scope_created", table_name="tracesets")
