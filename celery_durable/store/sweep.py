"""The Store's operations for the sweeper: take due runs, wake signalled ones. Mixed into
``Store``; the SQL is in ``sweep_statements``.

Example::

    for run in store.sweep_due_runs(500, 60.0, lost_error, ["shop.checkout"]):
        publish(run)
"""

from __future__ import annotations

from collections.abc import Sequence

from celery_durable.store.db.connections import Connections
from celery_durable.store.records import DueRun
from celery_durable.store.sql.build import TAKEOVER, params
from celery_durable.store.sql.statements import Statements

_NO_LIMIT = 2**31 - 1


class SweepOps:
    """Due runs (lost publishes, expired leases, timers, retries) and lost wake-ups."""

    db: Connections
    sql: Statements

    def count_discarded_run(self, run_id: str, name: str) -> bool:
        """A PENDING run of workflow ``name`` whose message a worker discarded (it hasn't
        registered the workflow): one more dispatch that no worker claimed (see
        ``durable_max_dispatches``); False when no such run waits."""
        values = params(run_id=run_id, name=name)
        with self.db.write() as conn:
            return bool(conn.execute(self.sql.sweep.count_discarded_run, values).rowcount)

    def make_unclaimed_runs_due(self, names: Sequence[str]) -> int:
        """The PENDING runs of the workflows ``names`` that were published and never
        claimed, due now (a worker that registers them starts); how many."""
        if not names:
            return 0
        with self.db.write() as conn:
            found = conn.execute(self.sql.sweep.make_unclaimed_runs_due, params(names=list(names)))
            return int(found.rowcount)

    def sweep_due_runs(
        self,
        limit: int,
        grace: float,
        lost_error: str,
        names: Sequence[str],
        max_recoveries: int = 10,
        takeover: float = TAKEOVER,
        lease_window: float = 0.0,
        gone_owners: Sequence[str] = (),
        max_dispatches: int | None = None,
        unclaimed_error: str = "",
    ) -> list[DueRun]:
        """Take the due runs of the workflows ``names`` for the sweeper to publish again;
        several sweepers never share one. Only the runs of this store's broker (its
        ``dispatcher``), those written before it was recorded, and those overdue by
        ``takeover`` seconds (no sweeper of their own broker is left to take them).

        An expired lease gives its attempt back and counts a recovery; a run at
        ``max_recoveries`` becomes FAILED with ``lost_error`` here (the poison guard). Such
        runs are returned with that status and must not be published. A lease due within
        ``lease_window`` seconds whose owner is one of ``gone_owners`` and whose proof of
        life is still gone counts as expired. A pending run published ``max_dispatches``
        times since its last claim (None: no limit) becomes FAILED with
        ``unclaimed_error`` here, returned likewise.
        """
        values = params(
            limit=limit,
            grace=grace,
            lost_error=lost_error,
            names=list(names),
            max_recoveries=max_recoveries,
            takeover=takeover,
            lease_window=lease_window if gone_owners else 0.0,
            gone_owners=list(gone_owners),
            max_dispatches=_NO_LIMIT if max_dispatches is None else max_dispatches,
            unclaimed_error=unclaimed_error,
        )
        with self.db.write() as conn:
            if gone_owners and not self.db.losses.quiet_for(lease_window):
                # Its checkout replaced a dropped connection: so may every session have
                # been dropped, live owners' too (engine/liveness.py). Leases decide.
                values.update(params(lease_window=0.0, gone_owners=[]))
            rows = conn.execute(self.sql.sweep.sweep_due_runs, values).all()
        return [DueRun(*r) for r in rows]

    def disown_run(self, run_id: str) -> None:
        """The run's first publish failed: hand it to every sweeper of the namespace,
        whatever their broker (until a worker claims it, as ``dispatcher`` says)."""
        with self.db.write() as conn:
            conn.execute(self.sql.runs.disown_run, params(run_id=run_id))

    def wake_run(self, run_id: str, signal_name: str, grace: float) -> DueRun | None:
        """A run waiting for ``signal_name`` becomes PENDING; the caller publishes it."""
        with self.db.write() as conn:
            row = conn.execute(
                self.sql.sweep.wake_run, params(run_id=run_id, signal=signal_name, grace=grace)
            ).first()
        return None if row is None else DueRun(*row)

    def wake_signalled_runs(
        self, grace: float, names: Sequence[str], takeover: float = TAKEOVER
    ) -> list[DueRun]:
        """Wake every waiting run of the workflows ``names`` that has a matching
        unconsumed signal stored at least ``grace`` seconds ago (a lost wake-up); a run of
        another broker only once the signal is ``takeover`` seconds older than that."""
        values = params(grace=grace, names=list(names), takeover=takeover)
        with self.db.write() as conn:
            rows = conn.execute(self.sql.sweep.wake_signalled_runs, values).all()
        return [DueRun(*r) for r in rows]

    def other_dispatchers(self, window: float, limit: int = 5) -> list[str]:
        """The other brokers whose runs are in this namespace: active ones, or finished
        ones started within ``window`` seconds. Empty for a store without a broker."""
        if self.sql.sweep.dispatcher is None:
            return []
        with self.db.read() as conn:
            rows = conn.execute(
                self.sql.sweep.other_dispatchers, params(window=window, limit=limit)
            ).all()
        return [str(row[0]) for row in rows]
