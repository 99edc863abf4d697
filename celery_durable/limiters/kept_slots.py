"""A limited step's record that keeps its slot for the run's next step (the SQL is in
``kept_slot_statements.py``): one transaction (one statement on Postgres), so the next step of
the run behind the same limiter and key starts without a take of its own; and the claim
that takes the slot of the run's first step, so that step starts without one either. Part
of the limiters area (``store.limiters``).

Example::

    written, kept = store.limiters.record_step_keeping_slot(run_id, fence, record, limit, "", 4)
    claim = store.limiters.claim_run_taking_slot("r1", owner, 30.0, 10, limit, "", 0)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from celery_durable.limiters.buckets import Limit
from celery_durable.limiters.kept_slot_statements import KeptSlotStatements
from celery_durable.limiters.run_slot_statements import LimitedRunStatements
from celery_durable.limiters.slot_claims import SlotClaim
from celery_durable.limiters.statements import LimiterStatements
from celery_durable.store.claims import claim_of_row
from celery_durable.store.db.connections import Connections
from celery_durable.store.records import Outcome, StepRecord, StepWrite
from celery_durable.store.sql.build import params, step_params
from celery_durable.store.store import Store


class KeptSlotSql(Protocol):
    """The statements a kept slot is written with (the limiters area's)."""

    limiters: LimiterStatements
    limited_runs: LimitedRunStatements
    kept_slots: KeptSlotStatements


class KeptSlotOps:
    """``record_step`` that keeps the step's slot for the run's next step."""

    store: Store
    db: Connections
    sql: KeptSlotSql
    _slot_params: Callable[[Limit, str, str, int, int], dict[str, Any]]
    _took_slot: Callable[[Limit, str, int, int], None]

    def record_step_keeping_slot(
        self, run_id: str, fence: int, step: StepRecord, limit: Limit, key: str, next_idx: int
    ) -> tuple[StepWrite, bool]:
        """Write the step (as ``record_step``, under the fence) and, in the same
        transaction, move the slot of ``limit``'s ``key`` it holds to the run's step
        ``next_idx``, unless other runs wait for the key. Returns the write's outcome and
        whether the slot was kept (else it is free, as after any record)."""
        values = step_params(run_id, fence, step)
        keep = {
            **values,
            **params(limiter=limit.name, key=key, concurrency=limit.concurrency, next=next_idx),
        }
        sql = self.sql.kept_slots
        if sql.record_step_keeping_slot is not None:
            row = self.db.one(sql.record_step_keeping_slot, keep, retry=True)
            recorded, kept = row is not None and bool(row[0]), None if row is None else row[1]
        else:
            with self.db.write() as conn:
                recorded = self.store._record_step_on(conn, values)
                if recorded:
                    kept = conn.execute(sql.keep_slot_for_next_step, keep).first()
                else:
                    kept = None
        if recorded:
            return StepWrite(Outcome.RECORDED), kept is not None
        return self.store._diagnose_step(run_id, fence, step.idx), False

    def claim_run_taking_slot(
        self,
        run_id: str,
        owner: str,
        lease: float,
        max_recoveries: int,
        limit: Limit,
        key: str,
        idx: int,
    ) -> SlotClaim | None:
        """``claim_run`` that, on a first delivery (no step recorded yet), also takes a
        free slot of ``limit``'s ``key`` for the run's step ``idx`` in the claim's
        statement, unless other runs wait for the key ahead of it (then the step takes its
        own, and waits as usual). ``SlotClaim.step_slot_taken`` says whether it did. SQLite,
        where a take is no round trip: the plain claim."""
        statement = self.sql.limited_runs.claim_taking_slot
        if statement is None or limit.concurrency is None or limit.rate is not None:
            plain = self.store.claim_run(run_id, owner, lease, max_recoveries)
            return None if plain is None else SlotClaim.of(plain)
        # Priority 0: the claim doesn't know the run's yet, so it never goes ahead of a
        # waiter it might not have passed; the step's own take then orders it.
        values = self._slot_params(limit, key, run_id, idx, 0)
        values.update(params(owner=owner, lease=lease, max_recoveries=max_recoveries))
        row = self.db.one(statement, values, relaxed=True)
        if row is None:
            return None
        slot, waited, queued = row[-3:]
        claim = claim_of_row(row)
        if slot is None:
            return SlotClaim.of(claim)
        if queued:  # it had waited at that step before: its wait is over
            self.db.one(self.sql.limiters.release_grant, values)
        self._took_slot(limit, key, values["p_from"], int(slot))
        return SlotClaim.of(claim, step_slot_taken=True, step_slot_waited=bool(waited))
