"""Initial tables: runs, steps, signals, state.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    op.create_table(
        f"{P}runs",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("queue", sa.String(255)),
        sa.Column("args", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("retry_backoff", sa.Float, nullable=False),
        sa.Column("owner", sa.String(255)),
        sa.Column("fence", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("due_at", sa.Float),
        sa.Column("ready_at", sa.Float),
        sa.Column("dispatches", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("wait_signal", sa.String(255)),
        sa.Column("result", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("cancel_reason", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("finished_at", sa.Float),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index(
        f"ix_{P}runs_due",
        f"{P}runs",
        ["namespace", "due_at"],
        postgresql_where=sa.text("due_at IS NOT NULL"),
        sqlite_where=sa.text("due_at IS NOT NULL"),
    )
    op.create_table(
        f"{P}steps",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("input", sa.Text, nullable=False),
        sa.Column("output", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        f"{P}signals",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("namespace", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("consumed_at", sa.Float),
        sa.Column("error", sa.Text),
        sa.UniqueConstraint("namespace", "run_id", "idempotency_key", name=f"uq_{P}signals_key"),
    )
    op.create_index(
        f"ix_{P}signals_pending",
        f"{P}signals",
        ["namespace", "run_id", "name", "id"],
        postgresql_where=sa.text("consumed_at IS NULL"),
        sqlite_where=sa.text("consumed_at IS NULL"),
    )
    op.create_table(
        f"{P}state",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table(f"{P}state")
    op.drop_index(f"ix_{P}signals_pending", table_name=f"{P}signals")
    op.drop_table(f"{P}signals")
    op.drop_table(f"{P}steps")
    op.drop_index(f"ix_{P}runs_due", table_name=f"{P}runs")
    op.drop_table(f"{P}runs")
