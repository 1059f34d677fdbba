"""signing keys in the database

The presigned URLs' HMAC key was a file in each process's data directory, so a URL minted by
one replica was refused by another. The keys now live here, shared: the newest signs, the
ones it replaced still verify for a URL lifetime.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signing_keys",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("signing_keys")
