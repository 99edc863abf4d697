"""The batch an item was published in: ``items.batch_size`` is the ``batch_size`` of the
``cd.map`` that dispatched it (NULL for one task per item). The sweeper, publishing again
items that never started (their message lost, or still queued past the dispatch grace),
sends them as batches of the same consecutive items, not one message per item.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    op.add_column(f"{P}items", sa.Column("batch_size", sa.Integer()))


def downgrade() -> None:
    with op.batch_alter_table(f"{P}items") as batch:
        batch.drop_column("batch_size")
