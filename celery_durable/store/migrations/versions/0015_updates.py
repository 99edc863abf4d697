"""Updates: ``updates`` holds the requests sent to a run with ``handle.update`` and their
answers (the body's reply, its rejection or the validator's refusal), one row each, found
again by the caller's idempotency key. ``durable show`` lists them; ``gc`` deletes them
with the run.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")
# A BIGINT primary key autoincrements in Postgres; SQLite only does so for INTEGER.
SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        f"{P}updates",
        sa.Column("id", SERIAL, primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("idx", sa.Integer()),
        sa.Column("answer", sa.Text()),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("answered_at", sa.Float()),
        sa.UniqueConstraint("namespace", "run_id", "idempotency_key", name=f"uq_{P}updates_key"),
    )
    op.create_index(f"ix_{P}updates_run", f"{P}updates", ["namespace", "run_id", "id"])
    op.create_index(
        f"ix_{P}updates_pending",
        f"{P}updates",
        ["namespace", "created_at"],
        postgresql_where=sa.text("status = 'pending'"),
        sqlite_where=sa.text("status = 'pending'"),
    )


def downgrade() -> None:
    op.drop_index(f"ix_{P}updates_pending", table_name=f"{P}updates")
    op.drop_index(f"ix_{P}updates_run", table_name=f"{P}updates")
    op.drop_table(f"{P}updates")
