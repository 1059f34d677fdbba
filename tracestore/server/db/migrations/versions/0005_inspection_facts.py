"""searchable inspection facts

``traceset_facts`` holds the (fact, value) pairs inspection derives for a traceset (GPU model,
backend, format, NCCL version), keyed for the ``inspected.<fact>=value`` list filters, and
``tracesets.inspected_world_size`` the world size, for ``minWorldSize``/``maxWorldSize``.
Tracesets inspected before this migration have no facts until they are inspected again.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 10:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tracesets") as batch:
        batch.add_column(sa.Column("inspected_world_size", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_tracesets_inspected_world_size", "tracesets", ["inspected_world_size", "id"]
    )
    op.create_table(
        "traceset_facts",
        sa.Column("fact", sa.String(32), nullable=False),
        sa.Column("value", sa.String(255), nullable=False),
        sa.Column("traceset_id", sa.String(64), sa.ForeignKey("tracesets.id"), nullable=False),
        sa.PrimaryKeyConstraint("fact", "value", "traceset_id"),
    )
    op.create_index("ix_traceset_facts_traceset", "traceset_facts", ["traceset_id"])


def downgrade() -> None:
    op.drop_index("ix_traceset_facts_traceset", table_name="traceset_facts")
    op.drop_table("traceset_facts")
    op.drop_index("ix_tracesets_inspected_world_size", table_name="tracesets")
    with op.batch_alter_table("tracesets") as batch:
        batch.drop_column("inspected_world_size")
