"""The Store's lease operations: renew a run's lease (or all of a process's) and give
leases back. Mixed into ``Store``; the SQL is in
``statements.RunStatements``.

Example::

    store.renew_leases("worker-1@host:4242", ["r1", "r2"], lease=30.0)   # the heartbeat
    store.release_run("r1", fence)                                        # shutting down
"""

from __future__ import annotations

from collections.abc import Sequence

from celery_durable.store.db.connections import Connections
from celery_durable.store.sql.build import params
from celery_durable.store.sql.statements import Statements


class LeaseOps:
    """The lease of a run: its owner extends it while working, and gives it back."""

    db: Connections
    sql: Statements

    def release_run(self, run_id: str, fence: int) -> bool:
        """Give the lease back (worker shutting down): not a failed attempt."""
        values = params(run_id=run_id, fence=fence)
        return self.db.one(self.sql.runs.release_run, values, retry=True) is not None

    def release_owner(self, owner: str, run_ids: Sequence[str]) -> list[str]:
        """Give back the leases an exiting process still holds on ``run_ids``."""
        if not run_ids:
            return []
        with self.db.write() as conn:
            rows = conn.execute(self.sql.runs.release_owner, params(owner=owner, ids=list(run_ids)))
            return [r.id for r in rows]

    def renew_lease(self, run_id: str, fence: int, lease: float) -> bool:
        """Extend one run's lease if this worker still holds it (and cancel wasn't asked)."""
        values = params(run_id=run_id, fence=fence, lease=lease)
        return self.db.one(self.sql.runs.renew_lease, values, retry=True) is not None

    def renew_leases(self, owner: str, run_ids: Sequence[str], lease: float) -> dict[str, bool]:
        """One statement renews all of a process's leases: the runs renewed, each with
        whether its cancellation was requested."""
        if not run_ids:
            return {}
        with self.db.write(borrow=True) as conn:  # the heartbeat opens no connection
            rows = conn.execute(
                self.sql.runs.renew_leases, params(owner=owner, ids=list(run_ids), lease=lease)
            )
            return {row.id: bool(row.cancel_requested) for row in rows}
