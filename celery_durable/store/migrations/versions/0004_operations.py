"""Operations: indexes that list and count runs, step durations, forks' origins.

Partial indexes over settled runs (waiting or finished): a run enters them when it suspends
or finishes, so the hot path's insert and claim never pay for them. On Postgres they are
built CONCURRENTLY, outside a transaction: a table of millions of runs keeps taking
writes while they build.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")

# Frozen here: a later change to the schema module must not change what this revision did.
SETTLED = "status IN ('WAITING', 'SUCCEEDED', 'FAILED', 'CANCELLED')"
INDEXES = {
    f"ix_{P}runs_status": ["namespace", "status", "created_at"],
    f"ix_{P}runs_workflow": ["namespace", "name", "status", "created_at"],
    f"ix_{P}runs_counts": ["namespace", "name", "status"],
}


def _is_postgres() -> bool:
    return bool(op.get_context().dialect.name == "postgresql")


def upgrade() -> None:
    # Nullable, no default: no table rewrite on Postgres, a plain ADD COLUMN on SQLite.
    op.add_column(f"{P}steps", sa.Column("duration", sa.Float))
    op.add_column(f"{P}runs", sa.Column("forked_from", sa.String(255)))
    op.add_column(f"{P}runs", sa.Column("forked_from_step", sa.Integer))
    if not _is_postgres():
        for name, columns in INDEXES.items():
            op.create_index(name, f"{P}runs", columns, sqlite_where=sa.text(SETTLED))
        return
    # CREATE INDEX CONCURRENTLY can't run in a transaction block.
    with op.get_context().autocommit_block():
        for name, columns in INDEXES.items():
            op.create_index(
                name,
                f"{P}runs",
                columns,
                postgresql_where=sa.text(SETTLED),
                postgresql_concurrently=True,
                if_not_exists=True,
            )


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name=f"{P}runs")
    with op.batch_alter_table(f"{P}steps") as batch:
        batch.drop_column("duration")
    with op.batch_alter_table(f"{P}runs") as batch:
        batch.drop_column("forked_from_step")
        batch.drop_column("forked_from")
