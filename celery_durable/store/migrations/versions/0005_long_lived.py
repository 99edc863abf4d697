"""Long-lived workflows: compensation (sagas) and continue_as_new.

``compensable``: the run finished a step that has a compensation, so a cancel of it while
it is idle hands it to a worker to roll back instead of ending it at once.
``compensation``: how its rollback went ("compensated", "compensation failed"), or NULL.
``generation``: how many times it continued as new; ``continued_from`` links the archived
history of its previous generation, and an archived generation's ``continued_as`` names
the run that continued.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    # ADD COLUMN with a constant default or none: no table rewrite on Postgres 11+.
    op.add_column(
        f"{P}runs",
        sa.Column("compensable", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.add_column(f"{P}runs", sa.Column("compensation", sa.String(32)))
    op.add_column(
        f"{P}runs",
        sa.Column("generation", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.add_column(f"{P}runs", sa.Column("continued_from", sa.String(255)))
    op.add_column(f"{P}runs", sa.Column("continued_as", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table(f"{P}runs") as batch:
        for name in ("continued_as", "continued_from", "generation", "compensation"):
            batch.drop_column(name)
        batch.drop_column("compensable")
