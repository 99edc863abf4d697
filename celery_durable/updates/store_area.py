"""The updates wing's store area, held as ``store.updates``: requests sent to a run with
``handle.update`` and their answers. The SQL is in ``statements`` (``UpdateStatements``).

The body's writes (take, refuse, answer, suspend) hold the run's row under its fencing
token, as a signal's consumption does: only the worker that owns the run answers. An
answer or a refusal notifies the run's channel on Postgres, which wakes its caller.

Example::

    stored = UPDATES.of(store).insert_update("r1", "add_item", '{"sku":"x"}', None)
    if stored.outcome is Outcome.STORED: ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from celery_durable.store.areas import AreaKey
from celery_durable.store.records import DueRun, Outcome, StepRecord
from celery_durable.store.schema import FINISHED_STATUSES
from celery_durable.store.sql.build import hold_run, params, step_params
from celery_durable.store.store import Store
from celery_durable.updates.statements import PENDING, RECEIVED, UpdateStatements


@dataclasses.dataclass(frozen=True)
class UpdateStored:
    """What storing a request did: STORED or DUPLICATE (``id``: the request, new or found
    by its idempotency key), NOT_FOUND, or FINISHED (the run's ``status``)."""

    outcome: Outcome
    id: int | None = None
    status: str | None = None


@dataclasses.dataclass(frozen=True)
class UpdateState:
    """A request as its caller reads it, with its run's status (None: no run)."""

    run_status: str | None
    name: str
    status: str
    answer: str | None


@dataclasses.dataclass(frozen=True)
class UpdateRow:
    """A request of a run as ``durable show`` lists it."""

    id: int
    name: str
    status: str
    idempotency_key: str | None
    idx: int | None
    created_at: float
    answered_at: float | None


def shown_status(status: str, run_status: str | None) -> str:
    """A request's status as operators and callers see it: one that a finished run left
    unanswered (pending, or received and never answered) was "not handled"."""
    if status in (PENDING, RECEIVED) and run_status in FINISHED_STATUSES:
        return "not handled"
    return status


class UpdatesArea:
    """Update requests of one store's namespace."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.sql = UpdateStatements(store.tables, store.dialect, store.namespace)
        self.steps = store.sql.steps

    @property
    def on_cancelled(self) -> Sequence[Any]:
        # Nothing to write: a cancelled run's unanswered requests read as not handled.
        return ()

    def insert_update(
        self, run_id: str, name: str, payload: str, idempotency_key: str | None
    ) -> UpdateStored:
        """Store a request: STORED, DUPLICATE (its key was used before: that request),
        NOT_FOUND or FINISHED. A retried request to a run that finished since finds its
        first one (and so its answer, or that it was not handled)."""
        sql = self.sql
        values = params(run_id=run_id, name=name, payload=payload, key=idempotency_key)
        with self.db.transaction() as conn:
            status = conn.execute(sql.insert_update_lock_run, values).scalar()
            if status is None:
                return UpdateStored(Outcome.NOT_FOUND)
            if idempotency_key is not None:
                found = conn.execute(sql.insert_update_find_key, values).scalar()
                if found is not None:
                    return UpdateStored(Outcome.DUPLICATE, int(found))
            if status in FINISHED_STATUSES:
                return UpdateStored(Outcome.FINISHED, status=str(status))
            key = conn.execute(sql.insert_update, values).inserted_primary_key
            assert key is not None  # an INSERT of one row
            return UpdateStored(Outcome.STORED, int(key[0]))

    def read_update(self, run_id: str, update_id: int) -> UpdateState | None:
        with self.db.read() as conn:
            row = conn.execute(self.sql.read_update, params(run_id=run_id, id=update_id)).first()
        if row is None:
            return None
        return UpdateState(row.run_status, str(row.name), str(row.status), row.answer)

    def oldest_update(self, run_id: str, name: str) -> tuple[int, str] | None:
        """The oldest pending request ``name`` of the run: (its id, its payload)."""
        with self.db.read() as conn:
            row = conn.execute(self.sql.oldest_update, params(run_id=run_id, name=name)).first()
        return None if row is None else (int(row.id), str(row.payload))

    def receive_update(
        self,
        run_id: str,
        fence: int,
        update_id: int,
        step: StepRecord,
        carried: Sequence[StepRecord] = (),
    ) -> Outcome:
        """Mark the request received by ``step`` and record the step, in one transaction:
        RECORDED, NO_SIGNAL (it is no longer pending), LEASE_LOST or CANCELLED."""
        with self.db.transaction() as conn:
            refused = hold_run(conn, self.steps, run_id, fence, carried)
            if refused is not None:
                return refused
            values = params(run_id=run_id, id=update_id, idx=step.idx)
            if conn.execute(self.sql.receive_update, values).rowcount != 1:
                return Outcome.NO_SIGNAL
            conn.execute(self.steps.record_step, step_params(run_id, fence, step))
            return Outcome.RECORDED

    def refuse_update(
        self,
        run_id: str,
        fence: int,
        update_id: int,
        reason: str,
        carried: Sequence[StepRecord] = (),
    ) -> Outcome:
        """The validator refused the request: REFUSED with ``reason``, no step written;
        RECORDED, LEASE_LOST or CANCELLED."""
        return self._settle(
            run_id, fence, self.sql.refuse_update, params(id=update_id, answer=reason), carried
        )

    def answer_update(
        self,
        run_id: str,
        fence: int,
        update_id: int,
        status: str,
        answer: str,
        step: StepRecord,
        carried: Sequence[StepRecord] = (),
    ) -> Outcome:
        """Store the body's answer (``status`` answered or rejected) and record ``step``,
        which made it, in one transaction: RECORDED, LEASE_LOST or CANCELLED."""
        values = params(id=update_id, status=status, answer=answer)
        return self._settle(run_id, fence, self.sql.answer_update, values, carried, step)

    def _settle(
        self,
        run_id: str,
        fence: int,
        statement: Any,
        values: dict[str, Any],
        carried: Sequence[StepRecord],
        step: StepRecord | None = None,
    ) -> Outcome:
        with self.db.transaction() as conn:
            refused = hold_run(conn, self.steps, run_id, fence, carried)
            if refused is not None:
                return refused
            conn.execute(statement, {**values, **params(run_id=run_id)})
            if step is not None:
                conn.execute(self.steps.record_step, step_params(run_id, fence, step))
            if self.store.dialect.notifies:  # the caller waits on the run's channel
                conn.execute(self.sql.notify(run_id))
            return Outcome.RECORDED

    def suspend_for_update(
        self,
        run_id: str,
        fence: int,
        step: StepRecord,
        name: str,
        wait: str,
        wake_at: float | None,
        carried: Sequence[StepRecord] = (),
    ) -> Outcome:
        """Record the waiting step and release the run as WAITING for ``wait``, unless a
        request ``name`` is already there: SUSPENDED, SIGNALLED, LEASE_LOST or CANCELLED."""
        sql = self.sql
        with self.db.transaction() as conn:
            # The run row locked: a request stored meanwhile waits, then sees WAITING.
            refused = hold_run(conn, self.steps, run_id, fence, carried)
            if refused is not None:
                return refused
            if conn.execute(sql.suspend_run_has_update, params(run_id=run_id, name=name)).first():
                return Outcome.SIGNALLED
            conn.execute(self.steps.record_step, step_params(run_id, fence, step))
            values = params(run_id=run_id, fence=fence, signal=wait, wake_at=wake_at)
            conn.execute(sql.suspend_run, values)
            return Outcome.SUSPENDED

    def wake_updated_runs(self, grace: float, names: Sequence[str]) -> list[DueRun]:
        """Wake each waiting run of the workflows ``names`` that has a pending request of
        the name it waits for, stored at least ``grace`` seconds ago (a lost wake-up)."""
        values = params(grace=grace, names=list(names))
        with self.db.write() as conn:
            rows = conn.execute(self.sql.wake_updated_runs, values).all()
        return [DueRun(*r) for r in rows]

    def run_updates(self, run_id: str) -> list[UpdateRow]:
        """The requests the run received, oldest first (refused ones too)."""
        with self.db.read() as conn:
            rows = conn.execute(self.sql.run_updates, params(run_id=run_id)).all()
        return [UpdateRow(*row) for row in rows]


UPDATES: AreaKey[UpdatesArea] = AreaKey("updates", UpdatesArea)
