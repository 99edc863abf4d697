"""The Store's claims of a run: by a delivery of its message (``claim_run``), or over a
live lease whose owner died (``take_over_run``). Mixed into
``Store``; the SQL is ``RunStatements._claim``.

Example::

    claim = store.claim_run("r1", "host:4242:1a2b3c4d:live", lease=30.0)
    if claim is None:      # another worker holds it: did its owner die?
        gone = store.gone_owner_of_run("r1", 60.0)
"""

from __future__ import annotations

from typing import Any

from celery_durable.store.db.connections import Connections
from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import Claim
from celery_durable.store.sql.build import params
from celery_durable.store.sql.statements import Statements


class ClaimOps:
    """Claims; each one commits asynchronously (see ``claim_run``)."""

    db: Connections
    dialect: Dialect
    sql: Statements

    def claim_run(
        self, run_id: str, owner: str, lease: float, max_recoveries: int = 10
    ) -> Claim | None:
        """Take the run if it is pending and ready, or running with an expired lease (a
        recovery, while the run has had fewer than ``max_recoveries``). A wing's claim
        variant (``engine/hooks.py``) may claim with its own statement built on this one,
        reading the wing's rows in the same round trip (``claim_of_row`` reads its row)."""
        # Asynchronous commit: the claim needs no fsync of its own. Every later write of the
        # run is a synchronous commit, which flushes the WAL up to and including the claim;
        # if the database crashes before that, the claim is lost, the run is as before it,
        # and the fencing token of the lost claim (unique) matches nothing.
        values = params(run_id=run_id, owner=owner, lease=lease, max_recoveries=max_recoveries)
        row = self.db.one(self.sql.runs.claim_run, values, relaxed=True)
        return None if row is None else claim_of_row(row)

    def take_over_run(
        self,
        run_id: str,
        owner: str,
        gone_owner: str,
        lease: float,
        max_recoveries: int = 10,
        *,
        quiet_for: float = 0.0,
    ) -> Claim | None:
        """Take the running run from ``gone_owner`` if that owner's proof of life is still
        gone, though its lease runs (a recovery, as ``claim_run`` of an expired lease).
        None, without asking, if this process lost a store connection in the last
        ``quiet_for`` seconds, the checkout for this statement included: the server may
        have dropped every session, live owners' too (``engine/liveness.py``)."""
        if not self.db.holds_sessions:
            return None
        values = params(
            run_id=run_id,
            owner=owner,
            gone_owner=gone_owner,
            lease=lease,
            max_recoveries=max_recoveries,
        )
        with self.db.write() as conn:
            if not self.db.losses.quiet_for(quiet_for):
                return None
            row = conn.execute(self.sql.runs.take_over_run, values).first()
        return None if row is None else claim_of_row(row)


def claim_of_row(row: Any) -> Claim:
    fence, attempts, max_attempts, retry_backoff, args, queue, parent_id, parent_idx = row[:8]
    return Claim(
        fence,
        attempts,
        max_attempts,
        retry_backoff,
        args,
        bool(row[8]),
        queue,
        parent_id,
        parent_idx,
        bool(row[9]),
        bool(row[10]),
        row[11],
        int(row[12]),
        row[13],
        int(row[14]),
    )
