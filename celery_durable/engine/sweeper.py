"""Worker-side machinery: the sweeper (per worker); the lease heartbeat (per process) is in
``leases``.

Both are started by Celery itself: the sweeper from a worker bootstep (``celery worker``
and ``celery.contrib.testing`` workers alike), the heartbeat lazily in whichever process
claims a run (prefork children included).

Example::

    runtime.sweeper.sweep_once()   # what the sweeper thread does every durable_poll_interval
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from celery_durable.core import faults, serialization
from celery_durable.core.logs import run_fields
from celery_durable.core.retry import backoff
from celery_durable.engine import retention
from celery_durable.engine.cancel import REVOKED, cancel
from celery_durable.engine.leases import FailureLog
from celery_durable.engine.liveness import LOOK_EVERY, GoneOwners, lease_window
from celery_durable.engine.publish import publish_or_leave, publish_woken
from celery_durable.engine.queues import QueueWatch
from celery_durable.store import FINISHED_STATUSES, TAKEOVER, DueRun
from celery_durable.store.areas import CHILD_SETTLES

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.worker")


def worker_lost_error(max_recoveries: int, what: str = "workflow") -> str:
    """The error a poison run (or item) ends with: its worker was lost ``max_recoveries``
    times."""
    return serialization.dumps(
        {
            "type": "celery_durable.errors.WorkerLost",
            "message": (
                f"the worker running this {what} was lost {max_recoveries} times "
                f"(durable_max_recoveries={max_recoveries}): each attempt killed its worker "
                "(out of memory, a crash in native code, SIGKILL?), so it is not run again"
            ),
            "traceback": "",
            "args": None,
            "step": None,  # no step failed: resume keeps every record
        }
    )


def never_claimed_error(max_dispatches: int) -> str:
    """The error of a run published ``max_dispatches`` times that no worker claimed."""
    return serialization.dumps(
        {
            "type": "celery_durable.errors.NeverClaimed",
            "message": (
                f"no worker claimed this run in {max_dispatches} dispatches "
                f"(durable_max_dispatches={max_dispatches}): every worker that took its "
                "message refused it or died of it (see their logs), or no worker consumes its "
                "queue; it is not published again"
            ),
            "traceback": "",
            "args": None,
            "step": None,  # no step failed: resume keeps every record
        }
    )


class Sweeper:
    """Publishes again the runs that need it: lease expired, publish lost, backoff or timer due."""

    def __init__(self, runtime: RuntimeView) -> None:
        self.runtime = runtime
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._revoked_seen: set[str] = set()
        # Features that own some task ids (an item's ``<run id>:<step>:<item>``): each
        # handles a revoke of one of its ids (True), before it is taken for a run's.
        self.revoke_handlers: list[Callable[[str], bool]] = []
        self.failures = FailureLog(runtime, "celery_durable sweep")
        self._next_retention = 0.0
        self.gone_owners = GoneOwners(runtime)

    @functools.cached_property
    def queues(self) -> QueueWatch:
        # Made on first use, not in __init__: the config is read from app.conf on first use.
        return QueueWatch(self.runtime.app, max(self.runtime.config.dispatch_grace, 5.0))

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name="celery_durable-sweeper", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        interval = self.runtime.config.poll_interval
        # A failed start-up probe counts as the first attempt: back off before the next.
        if self.failures.count:
            self._stop.wait(self.delay(interval))
        while not self._stop.is_set():
            try:
                self.sweep_once()
                self.failures.succeeded()
            except Exception as exc:
                self.failures.failed(exc, backoff(interval, self.failures.count + 1, 30 * interval))
            self._wait_for_next_sweep(self.delay(interval))

    def _wait_for_next_sweep(self, delay: float) -> None:
        """Wait ``delay`` s, looking for dead owners every ``LOOK_EVERY`` s meanwhile (a
        short read, where sessions hold locks): sweep at once when one is confirmed."""
        end = time.monotonic() + delay
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            suspect = self.gone_owners.next_look_in()
            if self._stop.wait(min(left, LOOK_EVERY if suspect is None else suspect)):
                return
            if time.monotonic() >= end or self.failures.count:
                continue  # a failing sweep backs off: no looks in between
            try:
                if self.gone_owners.confirmed():
                    return
            except Exception:  # noqa: BLE001 - the next sweep reports the database's trouble
                logger.debug("could not look for dead owners", exc_info=True)

    @property
    def takeover(self) -> float:
        """Seconds past due after which this sweeper dispatches a run of another broker
        too: no sweeper of that broker is left (it moved, or its workers are gone)."""
        return max(TAKEOVER, 10 * self.runtime.config.dispatch_grace)

    def delay(self, interval: float) -> float:
        """The wait before the next sweep: ``interval``, doubled per failure, up to 30x."""
        return backoff(interval, self.failures.count, 30 * interval)

    def sweep_once(self) -> int:
        """One sweep: every pass of ``runtime.sweep_passes``, in order; returns how many
        runs and items they published."""
        published = 0
        for each in list(self.runtime.sweep_passes):
            done = each.act()
            if each.publishes:
                published += done
        return published

    def dispatch_due_runs(self) -> int:
        """Runs whose lease expired (or whose owner is gone), whose message was lost, or
        whose backoff or timer is due: published again; poison runs failed."""
        runtime, config = self.runtime, self.runtime.config
        names = sorted(runtime.workflows)
        lost_error = worker_lost_error(config.max_recoveries)
        published = 0
        gone_owners = self.gone_owners.confirmed()
        while True:
            due = runtime.store.sweep_due_runs(
                config.sweep_batch,
                config.dispatch_grace,
                lost_error,
                names,
                config.max_recoveries,
                self.takeover,
                lease_window(runtime),
                gone_owners,
                config.max_dispatches,
                never_claimed_error(config.max_dispatches),
            )
            for run in due:
                if run.status in FINISHED_STATUSES:
                    self._announce_finished(run)
                else:
                    published += self.publish_again(run, "dispatched workflow %s run %s again")
            if len(due) < config.sweep_batch:
                return published

    def wake_signalled_runs(self) -> int:
        """Runs waiting for a signal that is stored but whose wake-up message was lost."""
        runtime, published = self.runtime, 0
        names = sorted(runtime.workflows)
        grace = runtime.config.dispatch_grace
        for run in runtime.store.wake_signalled_runs(grace, names, self.takeover):
            published += self.publish_again(run, "woke workflow %s run %s for a stored signal")
        return published

    def retain(self) -> int:
        """With ``durable_retention`` set, delete a small batch of the finished runs older
        than it; returns how many. While batches come back full the next sweep goes on,
        otherwise the next look is a while later (10 poll intervals, at most a minute)."""
        config = self.runtime.config
        if config.retention <= 0 or time.monotonic() < self._next_retention:
            return 0
        collected = retention.collect_retained(self.runtime, config.retention)
        more = any(n >= retention.RETENTION_BATCH for n in collected.runs.values())
        pause = 0.0 if more else min(60.0, 10 * config.poll_interval)
        self._next_retention = time.monotonic() + pause
        return collected.total

    def cancel_revoked(self) -> list[str]:
        """Cancel the runs, and revoke the items, whose task id this worker was told to
        revoke.

        ``celery control revoke`` (and Flower's Revoke button) only drops deliveries of the
        id; a run is published again under the same id (retries, wake-ups, recovery), so
        a revoke must cancel it in the store, durably.
        """
        from celery.worker import state as worker_state

        revoked = set(worker_state.revoked)
        fresh = sorted(revoked - self._revoked_seen)
        self._revoked_seen = revoked
        cancelled = []
        for run_id in fresh:
            if any(handle(run_id) for handle in self.revoke_handlers):
                cancelled.append(run_id)
                continue
            run = self.runtime.store.get_run(run_id)
            if run is not None and run.cancel_requested:
                continue  # being cancelled already, for its own reason (a deadline's stop)
            done = cancel(self.runtime, run_id, REVOKED)
            requested, status = done.requested, done.status
            if requested:
                cancelled.append(run_id)
                logger.info(
                    "workflow run %s revoked: cancellation requested (now %s)",
                    run_id,
                    status,
                    extra=run_fields(run_id),
                )
        return cancelled

    def publish_again(self, run: DueRun, done: str) -> int:
        """Publish a run the sweep took; on failure it stays due and a later sweep retries."""
        fields = run_fields(run.id, run.name)
        if not publish_or_leave(
            lambda: self.runtime.publish(run.id, run.name, run.args, run.queue),
            logger,
            "workflow %s run %s",
            run.name,
            run.id,
            fields=fields,
            then="a later sweep retries",
        ):
            return 0
        logger.info(done, run.name, run.id, extra=fields)
        return 1

    def _announce_finished(self, run: DueRun) -> None:
        """A run the sweep itself finished (worker lost too often, or cancelled)."""
        faults.reach(faults.AFTER_SETTLE, run_id=run.id, workflow=run.name)
        self.runtime.store.notify_finished(run.id)
        if run.parent_id is not None and run.parent_idx is not None:
            # A child: its parent's item takes the outcome (the sweep can't, holding many
            # runs' locks; if this is lost, orphaned_children catches it).
            woken = CHILD_SETTLES.of(self.runtime.store).settle_child_item(
                run.parent_id, run.parent_idx, run.id, self.runtime.config.dispatch_grace
            )
            publish_woken(self.runtime, woken, f"its child {run.id} had finished")
        fields = run_fields(run.id, run.name)
        if run.status == "FAILED":
            # Rare: read back which poison rule it was (lost workers, or never claimed).
            record = self.runtime.store.get_run(run.id)
            error = serialization.decode_error(record.error) if record and record.error else {}
            logger.error(
                "workflow %s run %s failed (poison run?): %s",
                run.name,
                run.id,
                error.get("message", "its worker was lost too often"),
                extra=fields,
            )
        else:
            logger.info(
                "workflow %s run %s cancelled (its worker was lost)", run.name, run.id, extra=fields
            )
