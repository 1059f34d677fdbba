"""users can be disabled

A disabled user's API tokens and JWTs are refused from the next request on; the row (and
what the user uploaded) stays.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 09:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("disabled_at")
