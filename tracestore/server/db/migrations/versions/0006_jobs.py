"""durable background jobs

``jobs`` holds the background work (a large traceset's inspection, the periodic sweep) that
any worker process may claim under a lease: ``tracestore worker``, or the worker inside
``tracestore serve``. A job whose worker died is claimed again once its lease lapses.
Tracesets a process left pending before this migration (the staleness sweep that found them
is gone) get an inspection job here.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 12:30:00
"""

from __future__ import annotations

from datetime import UTC, datetime

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
    pending = op.get_bind().execute(
        sa.text(
            "SELECT DISTINCT t.id FROM tracesets t JOIN traceset_files f ON f.traceset_id = t.id "
            "WHERE t.status = 'ready' AND f.role = 'primary' AND f.metadata_status = 'pending'"
        )
    )
    now = datetime.now(UTC)
    when = sa.DateTime(timezone=True)
    jobs = sa.table(
        "jobs",
        *(sa.column(name) for name in ("id", "kind", "subject", "dedupe_key", "state")),
        sa.column("attempts", sa.Integer()),
        *(sa.column(name, when) for name in ("run_after", "created_at", "updated_at")),
    )
    rows = [
        {
            "id": f"job_0006_{traceset_id}",
            "kind": "inspect",
            "subject": traceset_id,
            "dedupe_key": f"inspect:{traceset_id}",
            "state": "queued",
            "attempts": 0,
            "run_after": now,
            "created_at": now,
            "updated_at": now,
        }
        for (traceset_id,) in pending
    ]
    if rows:
        op.bulk_insert(jobs, rows)


def downgrade() -> None:
    op.drop_index("ix_jobs_state_run_after", table_name="jobs")
    op.drop_table("jobs")
