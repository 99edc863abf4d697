"""Streams: the values a run writes with ``write_stream`` and readers follow by offset.
``streams`` holds each key of a run (its length, when it was closed); ``stream_values``
its values, by dense offset, each known by where the run wrote it (generation, position,
by_step, seq) so that a retried or replayed write is stored once. ``gc`` deletes both
with the run.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")


def upgrade() -> None:
    op.create_table(
        f"{P}streams",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("length", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("closed_at", sa.Float()),
    )
    op.create_table(
        f"{P}stream_values",
        sa.Column("namespace", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("offset", sa.BigInteger(), primary_key=True),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("by_step", sa.Boolean(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint(
            "namespace",
            "run_id",
            "key",
            "generation",
            "position",
            "by_step",
            "seq",
            name=f"uq_{P}stream_values_write",
        ),
    )


def downgrade() -> None:
    op.drop_table(f"{P}stream_values")
    op.drop_table(f"{P}streams")
