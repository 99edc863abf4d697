"""The fanout wing's store area, held as ``store.fanout``: fan-out steps' items (claimed,
or run in an open transaction), batches, and child runs, with their statements
(``fanout/statements.py``), built once per store.

The kernel reaches it through protocols of its own (``store/areas.py``): ``cancel_run``
locks the parent, cancels the run's items, settles the parent's item and lists the
children to cancel in its one transaction (``CANCEL_PARTICIPANT``); the engine settles a
child (``CHILD_SETTLES``), renews and gives back items' leases (``ITEM_LEASES``); the
operator API lists a run's items (``ITEM_READS``).

Example::

    written = FANOUT.of(store).insert_fanout("r1", fence, step, fan)
    opened = FANOUT.of(store).open_item("r1", 3, 17)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery_durable.fanout.batches import BatchOps
from celery_durable.fanout.children import ChildOps
from celery_durable.fanout.statements import FanoutStatements
from celery_durable.store.areas import AreaKey
from celery_durable.store.store import Store


class FanoutArea(ChildOps, BatchOps):
    """Items, batches and children of one store's namespace."""

    sql: FanoutStatements

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.dialect = store.dialect
        self.sql = FanoutStatements(store)

    @property
    def on_cancelled(self) -> Sequence[Any]:
        return ()  # its part of a cancel is the kernel's CANCEL_PARTICIPANT


FANOUT: AreaKey[FanoutArea] = AreaKey("fanout", FanoutArea)
