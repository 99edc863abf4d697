"""Schedules: ``schedules`` holds one row per schedule declared in code (its definition as
the workers last declared it, whether an operator paused it or the code dropped it, and
where it stands: the next slot to fire, the last one fired and its run); ``schedule_slots``
one row per slot a schedule fired, skipped, buffered or was given by hand, which is also
what makes a slot fire once.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    op.create_table(
        f"{P}schedules",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("workflow", sa.String(255), nullable=False),
        sa.Column("cron", sa.String(255)),
        sa.Column("every", sa.Float()),
        sa.Column("tz", sa.String(64), nullable=False),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.Column("overlap", sa.String(16), nullable=False),
        sa.Column("catchup", sa.String(8), nullable=False),
        sa.Column("catchup_window", sa.Float(), nullable=False),
        sa.Column("definition", sa.String(64), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("disabled_at", sa.Float()),
        sa.Column("next_slot", sa.Float()),
        sa.Column("last_slot", sa.Float()),
        sa.Column("last_run_id", sa.String(255)),
        sa.Column("buffered_slot", sa.Float()),
        sa.Column("missed", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("skipped", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("declared_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_index(f"ix_{P}schedules_due", f"{P}schedules", ["namespace", "next_slot"])
    op.create_table(
        f"{P}schedule_slots",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("schedule", sa.String(255), primary_key=True),
        sa.Column("slot", sa.Float(), primary_key=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("run_id", sa.String(255)),
        sa.Column("fired_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table(f"{P}schedule_slots")
    op.drop_index(f"ix_{P}schedules_due", f"{P}schedules")
    op.drop_table(f"{P}schedules")
