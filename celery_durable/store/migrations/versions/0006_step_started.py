"""The dashboard's step timeline: when each step began, and in which attempt of its run.

``started_at``: the database's clock minus the time since the step began, taken by the
worker when it writes the row (a deferred step's record is written after it ran, so its
``created_at`` says nothing of when it ran). ``attempt``: the run's attempt counter under
the writer's fencing token. Rows written before this revision keep both NULL.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    # Nullable, no default: no table rewrite on Postgres, a plain ADD COLUMN on SQLite.
    op.add_column(f"{P}steps", sa.Column("started_at", sa.Float))
    op.add_column(f"{P}steps", sa.Column("attempt", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table(f"{P}steps") as batch:
        batch.drop_column("attempt")
        batch.drop_column("started_at")
