"""Transactional starts with SQLAlchemy, on the embedded default.

Run it (no server needed)::

    python examples/transactional.py

An order row and the run of its checkout are inserted in one transaction of your own: the
message goes to the broker once that commits, and a rollback takes both away. The same
works on Postgres (a ``postgresql+psycopg://`` engine on the store's database).
"""

from __future__ import annotations

import sqlalchemy as sa
from celery import Celery
from scratch import data_dir, file_broker, worker
from sqlalchemy.orm import Session

from celery_durable import Durable, WorkflowNotFound

DATA = data_dir("TRANSACTIONAL_DIR", driver=__name__ == "__main__")
DATABASE_URL = f"sqlite:///{DATA}/shop.sqlite3"

app = Celery("transactional", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=DATABASE_URL, poll_interval=0.2)

# --8<-- [start:workflow]
# Your application's engine and table, on the store's database.
engine = sa.create_engine(DATABASE_URL)
metadata = sa.MetaData()
orders = sa.Table(
    "orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("item", sa.String(100), nullable=False),
    sa.Column("status", sa.String(20), nullable=False, default="new"),
)


@durable.step
def mark_paid(order_id: int) -> str:
    with engine.begin() as conn:
        conn.execute(orders.update().where(orders.c.id == order_id).values(status="paid"))
    return "paid"


@durable.workflow
def checkout(order_id: int) -> dict[str, object]:
    return {"order": order_id, "status": mark_paid(order_id)}
    # --8<-- [end:workflow]


class OutOfStock(Exception):
    pass


def all_orders() -> list[tuple[int, str, str]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.select(orders).order_by(orders.c.id))]


# --8<-- [start:commit]
def place_order(item: str) -> None:
    with engine.begin() as conn:  # one transaction: the order, and the run of its checkout
        order_id = conn.execute(orders.insert().values(item=item)).inserted_primary_key[0]
        handle = checkout.apply_async((order_id,), connection=conn)
    # Committed: the order and the run exist together, and the message went to the broker.
    print(f"order {order_id}: {handle.get(timeout=60)}")
    # --8<-- [end:commit]


# --8<-- [start:rollback]
def place_refused_order(item: str) -> None:
    try:
        with Session(engine) as session, session.begin():  # an ORM Session works the same way
            order_id = session.execute(orders.insert().values(item=item)).inserted_primary_key[0]
            undone = checkout.apply_async((order_id,), connection=session)
            raise OutOfStock(f"no {item} left")  # after the start: both are rolled back
    except OutOfStock:
        pass
    try:
        durable.get_handle(undone.id)
    except WorkflowNotFound:
        print(f"rolled back: no {item} order, and no run {undone.id}")
    print(f"orders: {all_orders()}")
    # --8<-- [end:rollback]


def main() -> None:
    durable.migrate()
    metadata.create_all(engine)
    try:
        with worker("transactional", "TRANSACTIONAL_DIR", DATA, "-c", "2", "--loglevel=WARNING"):
            place_order("book")
            place_refused_order("lamp")
    finally:
        engine.dispose()


if __name__ == "__main__":
    main()
