"""The fanout wing's statements, built once per store for its area (``store.fanout``):
items (``item_statements``), items run in an open transaction (``open_item_statements``)
and batches (``batch_statements``), with the kernel's statements of runs and steps that
its transactions write too.

Example::

    sql = FanoutStatements(store)
    sql.items.claim_item      # UPDATE ... RETURNING status, name, input, attempts
"""

from __future__ import annotations

from celery_durable.fanout.batch_statements import BatchStatements
from celery_durable.fanout.item_statements import ItemStatements
from celery_durable.fanout.open_item_statements import OpenItemStatements
from celery_durable.store.store import Store


class FanoutStatements:
    """The wing's statement groups, and the kernel's it writes with in one transaction."""

    def __init__(self, store: Store) -> None:
        tables, dialect, namespace = store.tables, store.dialect, store.namespace
        self.items = ItemStatements(tables, dialect, namespace, store.dispatcher)
        self.open_items = OpenItemStatements(tables, dialect, namespace)
        self.batches = BatchStatements(tables, dialect, namespace)
        self.steps = store.sql.steps
        self.runs = store.sql.runs
