"""The sagas wing's store area, held as ``store.sagas``: a saga's rollback writes and
continue_as_new. It builds its statements (``sagas/statements.py``) once per store; the
kernel writes fenced steps and counts ancestors through ``FENCED_WRITES``.

Example::

    due = SAGAS.of(store).continue_as_new("r1", fence, '[["cursor-2"], {}]', grace=60.0)
    # the run is PENDING again with an empty history; publish ``due``
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from celery_durable.sagas.statements import LongLivedStatements
from celery_durable.store.areas import AreaKey
from celery_durable.store.records import DueRun, StepRecord
from celery_durable.store.sql.build import params, step_params, write_carried
from celery_durable.store.store import Store

_ARCHIVE_NAMESPACE = uuid.UUID("6f1c3b2e-57a4-4f49-9d0c-6a3e8f0b2c11")


def archive_id(run_id: str, generation: int) -> str:
    """The id of a run's archived generation: ``<id>@<generation>`` (a uuid5 of it past
    255 bytes, the limit of a run id)."""
    wanted = f"{run_id}@{generation}"
    if len(wanted.encode("utf-8")) <= 255:
        return wanted
    return str(uuid.uuid5(_ARCHIVE_NAMESPACE, wanted))


class SagasArea:
    """Fenced writes of a rollback (allowed after cancel) and continue_as_new."""

    def __init__(self, store: Store) -> None:
        self.db = store.db
        self.dialect = store.dialect
        self.sql = LongLivedStatements(store.tables, store.dialect, store.namespace)

    @property
    def on_cancelled(self) -> Sequence[Any]:
        return ()

    def record_fenced_step(self, run_id: str, fence: int, step: StepRecord) -> bool:
        """Write a step while this worker holds the run, cancel requested or not; False
        when the lease is gone. A stored "ok" row is kept (the write is then a no-op)."""
        values = step_params(run_id, fence, step)
        with self.db.write() as conn:
            if not self.dialect.locks_rows:  # checked first, in BEGIN IMMEDIATE
                if conn.execute(self.sql.check_fenced, values).first() is None:
                    return False
            written = conn.execute(self.sql.record_fenced_step, values).first()
            if written is not None:
                return True
            return conn.execute(self.sql.check_fenced, values).first() is not None

    def count_ancestors(self, run_id: str, limit: int) -> int:
        """How many runs ``run_id`` descends from (0: a top-level run), at most ``limit``."""
        with self.db.read() as conn:
            found = conn.execute(
                self.sql.count_ancestors, params(run_id=run_id, limit=limit)
            ).scalar()
        return int(found or 0)

    def mark_compensable(self, run_id: str, fence: int) -> bool:
        """The run finished a step with a compensation: a cancel rolls it back."""
        values = params(run_id=run_id, fence=fence)
        return self.db.one(self.sql.mark_compensable, values, retry=True) is not None

    def set_compensation(self, run_id: str, fence: int, outcome: str) -> bool:
        """Record how the run's rollback went ("compensated", "compensation failed")."""
        values = params(run_id=run_id, fence=fence, compensation=outcome)
        return self.db.one(self.sql.set_compensation, values, retry=True) is not None

    def continue_as_new(
        self,
        run_id: str,
        fence: int,
        args: str,
        grace: float,
        carried: Sequence[StepRecord] = (),
    ) -> DueRun | str | None:
        """End this generation of the run and start the next, in one transaction: its
        steps (and items) move to an archived SUCCEEDED run linked both ways, the run
        becomes PENDING with ``args`` and an empty history; its signals (pending ones
        carry over), state and id stay. Returns the run to publish, "CANCELLED" when
        cancellation was requested (nothing changed), or None when the lease is gone.
        ``carried``: deferred steps' records, archived with the rest of the history."""
        values = params(run_id=run_id, fence=fence, args=args, grace=grace)
        sql = self.sql
        with self.db.transaction() as conn:
            row = conn.execute(sql.continue_as_new_lock, values).first()
            if row is None:
                return None
            write_carried(conn, sql.record_fenced_step, run_id, fence, carried)
            if row.cancel_requested:
                return "CANCELLED"
            values["p_archive_id"] = archive_id(run_id, int(row.generation))
            conn.execute(sql.continue_as_new_archive, values)
            conn.execute(sql.continue_as_new_move_steps, values)
            conn.execute(sql.continue_as_new_move_items, values)
            due = conn.execute(sql.continue_as_new_reset, values).first()
            return None if due is None else DueRun(*due)


SAGAS: AreaKey[SagasArea] = AreaKey("sagas", SagasArea)
