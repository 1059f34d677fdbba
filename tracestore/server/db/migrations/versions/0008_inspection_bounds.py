"""each file's rank provenance in its row; a job's crashes

``traceset_files.rank_provenance`` holds where inspection found the file's ranks (the
census's ``rankProvenance``), so the GET answers it without parsing the traceset's stored
inspection (which was megabytes for an archive of many members, on every GET). Filled here
from the inspections already stored, each parsed once.

``jobs.crashes`` counts the attempts of a job whose worker died while running it (its lease
lapsed); past ``TRACESTORE_JOB_CRASHES`` the job is failed with that reason.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 05:00:00
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN, not a batch: SQLite adds these in place, without copying the tables.
    op.add_column("traceset_files", sa.Column("rank_provenance", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("crashes", sa.Integer(), nullable=False, server_default="0"))
    connection = op.get_bind()
    files = sa.table(
        "traceset_files",
        sa.column("traceset_id", sa.String),
        sa.column("name", sa.String),
        sa.column("role", sa.String),
        sa.column("rank_provenance", sa.Text),
    )
    ids = (
        connection.execute(sa.text("SELECT id FROM tracesets WHERE inspection IS NOT NULL"))
        .scalars()
        .all()
    )
    for traceset_id in ids:  # one inspection in memory at a time
        stored = connection.execute(
            sa.text("SELECT inspection FROM tracesets WHERE id = :id"), {"id": traceset_id}
        ).scalar()
        inspection = json.loads(stored) if isinstance(stored, str) else stored
        census = inspection.get("census") if isinstance(inspection, dict) else None
        told = census.get("rankProvenance") if isinstance(census, dict) else None
        if not isinstance(told, dict):
            continue
        for name, text in told.items():
            if isinstance(text, str):
                connection.execute(
                    files.update()
                    .where(
                        files.c.traceset_id == traceset_id,
                        files.c.name == name,
                        files.c.role == "primary",
                    )
                    .values(rank_provenance=text)
                )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("crashes")
    with op.batch_alter_table("traceset_files") as batch:
        batch.drop_column("rank_provenance")
