"""Fleet-wide limiters: ``limiter_keys`` holds one row per limiter and key (its token
bucket, and the row every grant of that key locks); ``limiter_grants`` one row per run (or
run's step) that holds a slot or waits for one. The runs' ``wait_limiter`` names the limiter
a run waits for (WAITING at a step, or PENDING with no message for a whole run) and
``priority`` orders its waiters. The limits themselves are declared in code. ``dedup_key``
names an active run (unique per workflow while PENDING, RUNNING or WAITING) and
``deadline_at`` is when a run with a timeout is cancelled.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    # Nullable, no default: no table rewrite on Postgres, a plain ADD COLUMN on SQLite.
    op.add_column(f"{P}runs", sa.Column("wait_limiter", sa.String(255)))
    op.add_column(f"{P}runs", sa.Column("priority", sa.Integer()))
    op.add_column(f"{P}runs", sa.Column("dedup_key", sa.String(255)))
    op.add_column(f"{P}runs", sa.Column("deadline_at", sa.Float()))
    active = "status IN ('PENDING', 'RUNNING', 'WAITING')"
    op.create_index(
        f"ux_{P}runs_dedup",
        f"{P}runs",
        ["namespace", "name", "dedup_key"],
        unique=True,
        postgresql_where=sa.text(f"dedup_key IS NOT NULL AND {active}"),
        sqlite_where=sa.text(f"dedup_key IS NOT NULL AND {active}"),
    )
    op.create_index(
        f"ix_{P}runs_deadline",
        f"{P}runs",
        ["namespace", "deadline_at"],
        postgresql_where=sa.text(f"deadline_at IS NOT NULL AND {active}"),
        sqlite_where=sa.text(f"deadline_at IS NOT NULL AND {active}"),
    )
    op.create_table(
        f"{P}limiter_keys",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("limiter", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("refilled_at", sa.Float(), nullable=False),
    )
    op.create_table(
        f"{P}limiter_grants",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("idx", sa.Integer(), primary_key=True),
        sa.Column("limiter", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("held", sa.Boolean(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.Column("granted_at", sa.Float()),
    )
    op.create_index(
        f"ix_{P}limiter_grants_key",
        f"{P}limiter_grants",
        ["namespace", "limiter", "key", "held", "priority", "requested_at"],
    )


def downgrade() -> None:
    op.drop_index(f"ix_{P}limiter_grants_key", f"{P}limiter_grants")
    op.drop_table(f"{P}limiter_grants")
    op.drop_table(f"{P}limiter_keys")
    op.drop_index(f"ix_{P}runs_deadline", f"{P}runs")
    op.drop_index(f"ux_{P}runs_dedup", f"{P}runs")
    with op.batch_alter_table(f"{P}runs") as batch:
        batch.drop_column("deadline_at")
        batch.drop_column("dedup_key")
        batch.drop_column("priority")
        batch.drop_column("wait_limiter")
