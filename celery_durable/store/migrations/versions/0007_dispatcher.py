"""Whose sweepers dispatch a run: ``dispatcher`` names the broker (its URL without the
password) of the app that started the run, and then of each worker that claimed it. Two
apps on one database and namespace but on different brokers then never publish each
other's runs into a broker that the other's workers don't read. Runs written before this
revision keep NULL, and any sweeper of the namespace dispatches them, as before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    # Nullable, no default: no table rewrite on Postgres, a plain ADD COLUMN on SQLite.
    op.add_column(f"{P}runs", sa.Column("dispatcher", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table(f"{P}runs") as batch:
        batch.drop_column("dispatcher")
