"""Composition: the items table (parallel steps, remote steps, children) and run links.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    # Plain ADD COLUMNs (NULL or a constant default): no table rewrite on Postgres 11+.
    op.add_column(f"{P}runs", sa.Column("parent_id", sa.String(255)))
    op.add_column(f"{P}runs", sa.Column("parent_idx", sa.Integer))
    op.add_column(
        f"{P}runs",
        sa.Column("wait_items", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.create_index(
        f"ix_{P}runs_wait_items",
        f"{P}runs",
        ["namespace"],
        postgresql_where=sa.text("wait_items = true"),
        sqlite_where=sa.text("wait_items = 1"),
    )
    op.create_table(
        f"{P}items",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("item", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("queue", sa.String(255)),
        sa.Column("input", sa.Text, nullable=False),
        sa.Column("output", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("recoveries", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("dispatches", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("owner", sa.String(255)),
        sa.Column("awaited", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("child_id", sa.String(255)),
        sa.Column("detached", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("due_at", sa.Float),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
    )
    op.create_index(
        f"ix_{P}items_due",
        f"{P}items",
        ["namespace", "due_at"],
        postgresql_where=sa.text("due_at IS NOT NULL"),
        sqlite_where=sa.text("due_at IS NOT NULL"),
    )
    op.create_index(
        f"ix_{P}items_open",
        f"{P}items",
        ["namespace", "run_id", "idx"],
        postgresql_where=sa.text("finished_at IS NULL"),
        sqlite_where=sa.text("finished_at IS NULL"),
    )
    op.create_index(
        f"ix_{P}items_children",
        f"{P}items",
        ["namespace", "child_id"],
        postgresql_where=sa.text("child_id IS NOT NULL AND finished_at IS NULL"),
        sqlite_where=sa.text("child_id IS NOT NULL AND finished_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_table(f"{P}items")
    op.drop_index(f"ix_{P}runs_wait_items", table_name=f"{P}runs")
    with op.batch_alter_table(f"{P}runs") as batch:
        batch.drop_column("wait_items")
        batch.drop_column("parent_idx")
        batch.drop_column("parent_id")
