"""What operators did to a run, and who: ``actions`` holds one row per cancel, resume,
fork or signal sent from the dashboard or the Django admin, with the user who acted (the
basic-auth user, the Django user; NULL when the dashboard has no authentication). A run's
page lists them; ``gc`` deletes them with the run.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

P = context.config.attributes.get("table_prefix", "durable_")
# A BIGINT primary key autoincrements in Postgres; SQLite only does so for INTEGER.
SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        f"{P}actions",
        sa.Column("id", SERIAL, primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(255)),
        sa.Column("detail", sa.Text()),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index(f"ix_{P}actions_run", f"{P}actions", ["namespace", "run_id", "id"])


def downgrade() -> None:
    op.drop_index(f"ix_{P}actions_run", table_name=f"{P}actions")
    op.drop_table(f"{P}actions")
