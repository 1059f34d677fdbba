"""the workload_family filter's indexes on SQLite

SQLite has no index over a JSON document's members, so a list filtered on
``workload_family`` parsed the metadata of every row its ordered walk passed until a page
matched. One expression index per visibility arm (workspace, tenant, public), in
(created_at, id) order after the family, lets that walk visit only the matching rows.
PostgreSQL answers the same filter from its GIN index (migration 0002) and gets none.

Building them reads every traceset's metadata once: 1.3 s at 200,000 tracesets on the
development machine.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 05:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

FAMILY = "json_extract(workload_metadata, '$.workload_family')"
INDEXES = (
    ("ix_tracesets_workspace_family_created", ["workspace_id"]),
    ("ix_tracesets_scope_tenant_family_created", ["scope", "tenant_id"]),
    ("ix_tracesets_scope_family_created", ["scope"]),
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name, prefix in INDEXES:
        op.create_index(name, "tracesets", [*prefix, sa.text(FAMILY), "created_at", "id"])


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name, _ in INDEXES:
        op.drop_index(name, table_name="tracesets")
