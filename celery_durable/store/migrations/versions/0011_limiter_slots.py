"""A limiter's slots as rows: ``limiter_slots`` holds slot 0, 1, ... of each limiter key,
each held by at most one run (or run's step) at a time. A worker takes a free slot's row
with ``FOR UPDATE SKIP LOCKED``, so takers of one key never wait for each other while slots
are free; a slot whose holder is no longer live (finished, waiting, past its lease) is free
without being written. Rows are added as a key first needs them; a deploy that lowers
``concurrency`` leaves rows past it unused, never counted. The waiters' index is rebuilt in
the order they are served (highest priority, then oldest), so a hand-off reads the next
ones in index order instead of sorting a key's every waiter.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    op.drop_index(f"ix_{P}limiter_grants_key", f"{P}limiter_grants")
    op.create_index(
        f"ix_{P}limiter_grants_next",
        f"{P}limiter_grants",
        ["namespace", "limiter", "key", "held", sa.text("priority DESC"), "requested_at", "run_id"],
    )
    op.create_table(
        f"{P}limiter_slots",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("limiter", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("slot", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.String(255)),
        sa.Column("idx", sa.Integer()),
        sa.Column("taken_at", sa.Float()),
    )
    op.create_index(
        f"ix_{P}limiter_slots_holder",
        f"{P}limiter_slots",
        ["namespace", "run_id", "idx"],
        postgresql_where=sa.text("run_id IS NOT NULL"),
        sqlite_where=sa.text("run_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(f"ix_{P}limiter_grants_next", f"{P}limiter_grants")
    op.create_index(
        f"ix_{P}limiter_grants_key",
        f"{P}limiter_grants",
        ["namespace", "limiter", "key", "held", "priority", "requested_at"],
    )
    op.drop_index(f"ix_{P}limiter_slots_holder", f"{P}limiter_slots")
    op.drop_table(f"{P}limiter_slots")
