"""Recoveries: how often a run's worker was lost, counted apart from its attempts.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    # A plain ADD COLUMN with a default: no table rewrite on Postgres 11+, and SQLite
    # supports it too (no batch copy).
    op.add_column(
        f"{P}runs",
        sa.Column("recoveries", sa.Integer, nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    with op.batch_alter_table(f"{P}runs") as batch:
        batch.drop_column("recoveries")
