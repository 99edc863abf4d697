"""What a run tells Celery when it settles: ``canvas`` holds, as JSON, the callbacks,
errbacks, the rest of its chain, its chord and group, its parent and root task ids, and
whether it reports to the result backend; NULL for a run with none of these (nothing is
reported). ``outbox_at`` is the run's outbox entry: set in the statement that
finishes a run with a canvas, to when it finished. The settling worker reports the run
(stores its outcome, publishes its callbacks) and clears it; the sweeper reports it once
it is older than the dispatch grace.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    # Nullable, no default: no table rewrite on Postgres, a plain ADD COLUMN on SQLite.
    op.add_column(f"{P}runs", sa.Column("canvas", sa.Text()))
    op.add_column(f"{P}runs", sa.Column("outbox_at", sa.Float()))
    # Holds only the runs whose report is still owed: costs nothing once they are cleared.
    op.create_index(
        f"ix_{P}runs_outbox",
        f"{P}runs",
        ["namespace", "outbox_at"],
        postgresql_where=sa.text("outbox_at IS NOT NULL"),
        sqlite_where=sa.text("outbox_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(f"ix_{P}runs_outbox", f"{P}runs")
    with op.batch_alter_table(f"{P}runs") as batch:
        batch.drop_column("outbox_at")
        batch.drop_column("canvas")
