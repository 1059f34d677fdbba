"""durable background jobs

``jobs`` holds the background work (a large traceset's inspection, the periodic sweep) that
any worker process may claim under a lease: ``tracestore worker``, or the worker inside
``tracestore serve``. A job whose worker died is claimed again once its lease lapses.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 12:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("subject", sa.String(255), nullable=True),
        sa.Column("dedupe_key", sa.String(255), nullable=True, unique=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("run_after", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_jobs_state_run_after", "jobs", ["state", "run_after"])


def downgrade() -> None:
    op.drop_index("ix_jobs_state_run_after", table_name="jobs")
    op.drop_table("jobs")
