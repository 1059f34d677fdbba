"""owners and tags: who uploaded and who edited a traceset, its tags searchable

``traceset_tags`` holds one row per (tag, traceset), keyed for the list's ``tag`` filters, and
is filled here from the tags every traceset already holds. ``tracesets`` gains ``edited_at``
and ``edited_by`` (the last PATCH of its name, description or tags; null until then) and one
index per visibility arm for the ``uploadedBy`` filter, in created order: the workspace arm's
on (uploader, workspace), the tenant and public arms' on (uploader, scope), since a user's
tracesets are all of one tenant.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

CREATOR_INDEXES = (
    ("ix_tracesets_creator_workspace_created", ["created_by", "workspace_id", "created_at", "id"]),
    ("ix_tracesets_creator_scope_created", ["created_by", "scope", "created_at", "id"]),
)


def upgrade() -> None:
    # ADD COLUMN, not a batch: SQLite adds these in place, without copying the table.
    op.add_column("tracesets", sa.Column("edited_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("tracesets", sa.Column("edited_by", sa.String(64), nullable=True))
    for name, columns in CREATOR_INDEXES:
        op.create_index(name, "tracesets", columns)
    op.create_table(
        "traceset_tags",
        sa.Column("tag", sa.String(64), nullable=False),
        sa.Column("traceset_id", sa.String(64), sa.ForeignKey("tracesets.id"), nullable=False),
        sa.PrimaryKeyConstraint("tag", "traceset_id"),
    )
    op.create_index("ix_traceset_tags_traceset", "traceset_tags", ["traceset_id"])
    # The tags stored so far (a JSON array of strings each), once per traceset.
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "INSERT INTO traceset_tags (tag, traceset_id) "
            "SELECT DISTINCT tag, id FROM tracesets, json_array_elements_text(tags) AS tag "
            "WHERE json_typeof(tags) = 'array'"
        )
    else:
        op.execute(
            "INSERT INTO traceset_tags (tag, traceset_id) "
            "SELECT DISTINCT each.value, tracesets.id FROM tracesets, json_each(tracesets.tags) "
            "AS each WHERE json_type(tracesets.tags) = 'array' AND each.type = 'text'"
        )


def downgrade() -> None:
    op.drop_index("ix_traceset_tags_traceset", table_name="traceset_tags")
    op.drop_table("traceset_tags")
    for name, _ in CREATOR_INDEXES:
        op.drop_index(name, table_name="tracesets")
    # DROP COLUMN in place (SQLite 3.35+), as 0009's downgrade.
    for column in ("edited_by", "edited_at"):
        op.execute(f"ALTER TABLE tracesets DROP COLUMN {column}")
