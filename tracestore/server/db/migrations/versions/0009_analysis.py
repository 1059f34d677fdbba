"""trace analysis: each analysed file's rank, a traceset's analysis, the list's columns

``file_analyses`` holds one row per analysed Kineto file (its rank's analysis as JSON text,
the figures the summary takes, issue 45's detail), ``traceset_analyses`` one per traceset
(the per-file jobs still to end, the summary once assembled). ``tracesets`` gains the
summary's medians the list filters and sorts on: an index each for the two percentages'
ranges (as ``inspected_world_size`` has), and one per visibility arm for the ``step_time``
sort, partial (only analysed tracesets are in it, so a traceset costs it nothing until
then). ``jobs.ran_by`` keeps which worker ended a job.

Existing tracesets get no analysis (their GET answers ``none`` and says why); adding the
columns and the empty indexes copies no table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

MEDIANS = ("median_idle_pct", "median_overlap_pct", "median_step_time_us")
STEP_TIME_INDEXES = (
    ("ix_tracesets_workspace_step_time", ["workspace_id"]),
    ("ix_tracesets_scope_tenant_step_time", ["scope", "tenant_id"]),
    ("ix_tracesets_scope_step_time", ["scope"]),
)
STEP_TIME_ANALYSED = "median_step_time_us IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        "traceset_analyses",
        sa.Column("traceset_id", sa.String(64), sa.ForeignKey("tracesets.id"), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("remaining", sa.Integer(), nullable=False),
        sa.Column("inspects", sa.Boolean(), nullable=False),
        sa.Column("analyzed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("summary_text", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "file_analyses",
        sa.Column("traceset_id", sa.String(64), sa.ForeignKey("tracesets.id"), primary_key=True),
        sa.Column("position", sa.Integer(), primary_key=True),
        sa.Column("file", sa.String(1024), nullable=False),
        sa.Column("rank", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("analysis_text", sa.Text(), nullable=True),
        *(
            sa.Column(name, sa.Double(), nullable=True)
            for name in ("compute_pct", "non_compute_pct", "idle_pct", "overlap_pct")
        ),
        sa.Column("step_time_us", sa.Double(), nullable=True),
        sa.Column("detail", sa.LargeBinary(), nullable=True),
        sa.Column("analyzed_by", sa.String(128), nullable=False),
        sa.Column("analyzed_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_file_analyses_traceset_rank", "file_analyses", ["traceset_id", "rank"])
    # ADD COLUMN, not a batch: SQLite adds these in place, without copying the tables.
    for name in MEDIANS:
        op.add_column("tracesets", sa.Column(name, sa.Double(), nullable=True))
    op.add_column("jobs", sa.Column("ran_by", sa.String(128), nullable=True))
    op.create_index("ix_tracesets_median_idle_pct", "tracesets", ["median_idle_pct", "id"])
    op.create_index("ix_tracesets_median_overlap_pct", "tracesets", ["median_overlap_pct", "id"])
    for name, prefix in STEP_TIME_INDEXES:
        op.create_index(
            name,
            "tracesets",
            [*prefix, "median_step_time_us", "created_at", "id"],
            sqlite_where=sa.text(STEP_TIME_ANALYSED),
            postgresql_where=sa.text(STEP_TIME_ANALYSED),
        )


def downgrade() -> None:
    op.drop_index("ix_file_analyses_traceset_rank", table_name="file_analyses")
    op.drop_table("file_analyses")
    op.drop_table("traceset_analyses")
    for name, _ in STEP_TIME_INDEXES:
        op.drop_index(name, table_name="tracesets")
    op.drop_index("ix_tracesets_median_overlap_pct", table_name="tracesets")
    op.drop_index("ix_tracesets_median_idle_pct", table_name="tracesets")
    # DROP COLUMN in place (SQLite 3.35+), not a batch: a batch copies tracesets and drops
    # the old table, which the rows of every table referring to it forbid.
    for table, column in (*(("tracesets", name) for name in MEDIANS), ("jobs", "ran_by")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
