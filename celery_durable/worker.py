"""Worker-side machinery: the lease heartbeat (per process) and the sweeper (per worker).

Both are started by Celery itself: the sweeper from a worker bootstep (``celery worker``
and ``celery.contrib.testing`` workers alike), the heartbeat lazily in whichever process
claims a run (prefork children included).

Example::

    durable.sweep_once()   # what the sweeper thread does every durable_poll_interval
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections import Counter
from typing import TYPE_CHECKING, Any

from celery import bootsteps

from . import faults, operations, serialization
from .apps import durables_of
from .context import LeaseClock
from .fanout import cancel, publish_woken
from .logs import run_fields
from .store import FINISHED_STATUSES, DueRun, OpenItem
from .store.outage import describe, is_unreachable, summary

if TYPE_CHECKING:
    from .extension import Durable

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


class FailureLog:
    """Consecutive failures of one background loop, logged once per backoff step.

    The 1st, 2nd, 4th, 8th, ... failure in a row is logged, not every attempt: one line
    when the database is unreachable (it names the database, without the password), with
    the traceback for any other error. The first success afterwards logs one line.
    """

    def __init__(self, durable: Durable, what: str) -> None:
        self.durable = durable
        self.what = what
        self.count = 0

    def failed(self, exc: BaseException, next_try: float) -> None:
        self.count += 1
        if self.count & (self.count - 1):
            return  # not a power of two: this backoff step was logged already
        where = f"{self.what} failed ({self.count} in a row; next try in {next_try:.1f}s)"
        if is_unreachable(exc):
            url = describe(self.durable.store.url)
            logger.error("%s: the database %s is unreachable: %s", where, url, summary(exc))
            return
        try:
            self.durable.store.raise_if_tables_missing(exc)
        except Exception as explained:  # noqa: BLE001 - log the clearer message
            logger.error("%s: %s", where, explained)
            return
        logger.error("%s", where, exc_info=exc)

    def succeeded(self) -> None:
        if self.count:
            logger.warning("%s works again after %d failure(s)", self.what, self.count)
        self.count = 0


def backoff(base: float, failures: int, cap: float) -> float:
    """``base`` doubled per failure in a row, at most ``cap``."""
    return float(min(base * 2 ** min(failures, 30), cap))


_KEEPERS: weakref.WeakSet[LeaseKeeper] = weakref.WeakSet()


def _reset_keepers_after_fork() -> None:
    for keeper in list(_KEEPERS):
        keeper._reset_after_fork()


os.register_at_fork(after_in_child=_reset_keepers_after_fork)


class LeaseKeeper:
    """Renews the leases of the runs this process executes, one statement per beat."""

    def __init__(self, durable: Durable) -> None:
        self.durable = durable
        self._pid = -1
        self._owner = ""
        self._runs: Counter[str] = Counter()
        self._clocks: dict[str, list[LeaseClock]] = {}
        # Items this process runs: (run id, step index, item, claim token).
        self._items: set[tuple[str, int, int, str]] = set()
        # Items this process runs in an open transaction, and since when (monotonic).
        self._open: dict[OpenItem, float] = {}
        self._claims = itertools.count(1)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._failures = FailureLog(durable, "lease heartbeat")
        _KEEPERS.add(self)

    @property
    def owner(self) -> str:
        """This process's owner id, recorded on the runs it claims."""
        if self._pid != os.getpid():
            self._reset_after_fork()
        return self._owner

    def _reset_after_fork(self) -> None:
        self._pid = os.getpid()
        self._owner = f"{socket.gethostname()}:{self._pid}:{uuid.uuid4().hex[:8]}"
        self._runs = Counter()
        self._clocks = {}
        self._items = set()
        self._open = {}
        self._claims = itertools.count(1)
        self._thread = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._failures = FailureLog(self.durable, "lease heartbeat")

    def track(self, run_id: str, clock: LeaseClock | None = None) -> None:
        """Keep renewing ``run_id``'s lease; each renewal is noted on ``clock``."""
        self.owner  # noqa: B018 - resets state in a freshly forked child
        with self._lock:
            self._runs[run_id] += 1
            if clock is not None:
                self._clocks.setdefault(run_id, []).append(clock)
            self._start_beating()

    def _start_beating(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._beat, name="celery_durable-heartbeat", daemon=True
            )
            self._thread.start()

    def item_token(self) -> str:
        """A claim token for an item, unique across processes and claims: its fence."""
        return f"{self.owner}:{next(self._claims)}"

    def track_item(self, held: tuple[str, int, int, str]) -> None:
        with self._lock:
            self._items.add(held)
            self._start_beating()

    def untrack_item(self, held: tuple[str, int, int, str]) -> None:
        with self._lock:
            self._items.discard(held)

    def track_open_item(self, opened: OpenItem) -> None:
        """An item run in its open transaction: converted to a claim after a beat."""
        self.owner  # noqa: B018 - resets state in a freshly forked child
        with self._lock:
            self._open[opened] = time.monotonic()
            self._start_beating()

    def untrack_open_item(self, opened: OpenItem) -> None:
        with self._lock:
            self._open.pop(opened, None)
        if opened.owner is not None:
            self.untrack_item((*opened.key, opened.owner))

    def _convert_long_items(self, period: float) -> None:
        """Items that ran longer than a beat trade their open transaction for a lease."""
        with self._lock:
            due = [o for o, since in self._open.items() if time.monotonic() - since >= period]
        for opened in due:
            owner = self.item_token()
            if opened.convert(owner, self.durable.config.lock_timeout):
                self.track_item((*opened.key, owner))
            with self._lock:
                self._open.pop(opened, None)

    def items(self) -> list[tuple[str, int, int, str]]:
        with self._lock:
            return sorted(self._items)

    def untrack(self, run_id: str) -> None:
        with self._lock:
            self._runs[run_id] -= 1
            if self._runs[run_id] <= 0:
                del self._runs[run_id]
                self._clocks.pop(run_id, None)

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._runs)

    def _beat(self) -> None:
        config = self.durable.config
        period = config.lock_timeout / 3
        delay = period
        while not self._stop.wait(delay):
            delay = period
            store = self.durable.store
            try:
                self._convert_long_items(period)
                runs, items = self.running(), self.items()
                if not runs and not items:
                    continue
                renewed = store.renew_leases(self._owner, runs, config.lock_timeout)
                renewed += store.renew_item_leases(items, config.lock_timeout)
            except Exception as exc:
                # Retry sooner than a beat (the leases are running out), backing off up to
                # one beat: never renewing less often than normal, never hammering.
                delay = backoff(period / 8, self._failures.count + 1, period)
                self._failures.failed(exc, delay)
                continue
            self._failures.succeeded()
            if renewed < len(runs) + len(items):
                # Which ones were lost is for each run's next step to find out (it checks).
                logger.warning(
                    "renewed %d of %d leases; the others were lost", renewed, len(runs) + len(items)
                )
                continue
            with self._lock:
                clocks = [clock for run in runs for clock in self._clocks.get(run, ())]
            for clock in clocks:
                clock.renewed()

    def release_all(self) -> list[str]:
        """Give back this process's leases (process exit): others resume at once."""
        self._stop.set()
        if self._pid != os.getpid():
            return []
        try:
            released = self.durable.store.release_owner(self._owner, self.running())
            self.durable.store.release_items(self.items())
        except Exception:
            logger.exception("could not give back the leases of %s", self._owner)
            return []
        if released:
            logger.warning(
                "gave back the leases of %d run(s) on exit: %s", len(released), ", ".join(released)
            )
        return released


class Sweeper:
    """Publishes again the runs that need it: lease expired, publish lost, backoff or timer due."""

    def __init__(self, durable: Durable) -> None:
        self.durable = durable
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._revoked_seen: set[str] = set()
        self.failures = FailureLog(durable, "celery_durable sweep")
        self._next_retention = 0.0

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
        interval = self.durable.config.poll_interval
        # A failed start-up probe counts as the first attempt: back off before the next.
        if self.failures.count:
            self._stop.wait(self.delay(interval))
        while not self._stop.is_set():
            try:
                self.sweep_once()
                self.failures.succeeded()
            except Exception as exc:
                self.failures.failed(exc, backoff(interval, self.failures.count + 1, 30 * interval))
            self._stop.wait(self.delay(interval))

    def delay(self, interval: float) -> float:
        """The wait before the next sweep: ``interval``, doubled per failure, up to 30x."""
        return backoff(interval, self.failures.count, 30 * interval)

    def sweep_once(self) -> int:
        """One sweep; returns how many runs were published."""
        durable, config = self.durable, self.durable.config
        names = sorted(durable.workflows)
        lost_error = worker_lost_error(config.max_recoveries)
        published = 0
        while True:
            due = durable.store.sweep_due_runs(
                config.sweep_batch, config.dispatch_grace, lost_error, names, config.max_recoveries
            )
            for run in due:
                if run.status in FINISHED_STATUSES:
                    self._announce_finished(run)
                else:
                    published += self._publish(run, "dispatched workflow %s run %s again")
            if len(due) < config.sweep_batch:
                break
        for run in durable.store.wake_signalled_runs(config.dispatch_grace, names):
            # A signal whose wake-up message was lost: the run still waits for it.
            published += self._publish(run, "woke workflow %s run %s for a stored signal")
        published += self.sweep_items(names)
        self.cancel_revoked()
        self.retain()
        return published

    def sweep_items(self, names: list[str]) -> int:
        """Items: publish again the lost, the orphaned and the due retries; fail poison
        items; wake runs whose awaited items have all settled but were never woken."""
        durable, config = self.durable, self.durable.config
        store, grace = durable.store, config.dispatch_grace
        published = 0
        steps = sorted(durable.steps)
        while steps:
            due = store.sweep_due_items(config.sweep_batch, grace, steps, config.max_recoveries)
            batches: dict[tuple[str, str | None, str, int], list[int]] = {}
            for item in due:
                batches.setdefault((item.name, item.queue, item.run_id, item.idx), []).append(
                    item.item
                )
            for (name, queue, run_id, idx), numbers in batches.items():
                durable.dispatch.publish_items(name, queue, run_id, idx, numbers)
                published += len(numbers)
                logger.info(
                    "dispatched %d item(s) of step %d (%s) of run %s again",
                    len(numbers),
                    idx,
                    name,
                    run_id,
                    extra=run_fields(run_id, step_index=idx),
                )
            if len(due) < config.sweep_batch:
                break
        if steps:
            lost_error = worker_lost_error(config.max_recoveries, "step")
            for lost in store.lost_items(config.sweep_batch, steps, config.max_recoveries):
                written = store.settle_item(
                    lost.run_id, lost.idx, lost.item, lost.owner, "error", None, lost_error, grace
                )
                logger.error(
                    "item %d of step %d of run %s failed: its worker was lost %d times",
                    lost.item,
                    lost.idx,
                    lost.run_id,
                    config.max_recoveries,
                    extra=run_fields(lost.run_id, step_index=lost.idx),
                )
                publish_woken(durable, written.woken, "a poison item failed")
        for parent_id, idx, child_id in store.orphaned_children(config.sweep_batch):
            woken = store.settle_child_item(parent_id, idx, child_id, grace)
            publish_woken(durable, woken, f"its child {child_id} had finished")
        for run in store.wake_item_waiters(grace, names):
            # The transaction that settled its last item did not wake it (a crash?).
            published += self._publish(run, "woke workflow %s run %s: its items have settled")
        return published

    def retain(self) -> int:
        """With ``durable_retention`` set, delete a small batch of the finished runs older
        than it; returns how many. While batches come back full the next sweep goes on,
        otherwise the next look is a while later (10 poll intervals, at most a minute)."""
        config = self.durable.config
        if config.retention <= 0 or time.monotonic() < self._next_retention:
            return 0
        collected = operations.collect_retained(self.durable, config.retention)
        more = any(n >= operations.RETENTION_BATCH for n in collected.runs.values())
        pause = 0.0 if more else min(60.0, 10 * config.poll_interval)
        self._next_retention = time.monotonic() + pause
        return collected.total

    def cancel_revoked(self) -> list[str]:
        """Cancel the runs whose task id this worker was told to revoke.

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
            done = cancel(self.durable, run_id, "revoked (celery control revoke)")
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

    def _publish(self, run: DueRun, done: str) -> int:
        """Publish a run the sweep took; on failure it stays due and a later sweep retries."""
        fields = run_fields(run.id, run.name)
        try:
            self.durable.publish(run.id, run.name, run.args, run.queue)
        except Exception:
            logger.exception(
                "publishing workflow %s run %s failed; a later sweep retries",
                run.name,
                run.id,
                extra=fields,
            )
            return 0
        logger.info(done, run.name, run.id, extra=fields)
        return 1

    def _announce_finished(self, run: DueRun) -> None:
        """A run the sweep itself finished (worker lost too often, or cancelled)."""
        faults.reach(faults.AFTER_SETTLE, workflow_id=run.id, workflow=run.name)
        self.durable.store.notify_finished(run.id)
        if run.parent_id is not None and run.parent_idx is not None:
            # A child: its parent's item takes the outcome (the sweep can't, holding many
            # runs' locks; if this is lost, orphaned_children catches it).
            woken = self.durable.store.settle_child_item(
                run.parent_id, run.parent_idx, run.id, self.durable.config.dispatch_grace
            )
            publish_woken(self.durable, woken, f"its child {run.id} had finished")
        fields = run_fields(run.id, run.name)
        if run.status == "FAILED":
            logger.error(
                "workflow %s run %s failed: its worker was lost %d times (poison run?)",
                run.name,
                run.id,
                self.durable.config.max_recoveries,
                extra=fields,
            )
        else:
            logger.info(
                "workflow %s run %s cancelled (its worker was lost)", run.name, run.id, extra=fields
            )


class DurableSweeper(bootsteps.StartStopStep):  # type: ignore[misc]
    """A worker bootstep: runs the sweeper of every Durable bound to the worker's app.

    It runs in every ``celery worker`` (and ``celery.contrib.testing`` worker); nothing
    else to deploy. Each Durable sweeps its own namespace.
    """

    label = "celery_durable sweeper"
    # After the pool: children fork before the sweeper thread exists.
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        self.sweepers: list[Sweeper] = []

    def start(self, worker: Any) -> None:
        for durable in durables_of(worker.app):
            # Import the driver and open the engine in the main thread: a child forked
            # while another thread holds an import lock would hang on that import.
            try:
                durable.store.now()
            except Exception as exc:
                # One clear line (no traceback): the sweeper's backoff logs what follows.
                durable.sweeper.failures.count = 1
                logger.error(
                    "celery_durable: the database %s is %s: %s; workflows of namespace %r "
                    "can't start or run until it is back (the sweeper retries with backoff)",
                    describe(durable.store.url),
                    "unreachable" if is_unreachable(exc) else "not usable",
                    summary(exc),
                    durable.config.namespace,
                )
            durable.sweeper.start()
            self.sweepers.append(durable.sweeper)
            logger.info(
                "celery_durable sweeper started (namespace %r, every %.2fs)",
                durable.config.namespace,
                durable.config.poll_interval,
            )

    def stop(self, worker: Any) -> None:
        for sweeper in self.sweepers:
            sweeper.stop()
        self.sweepers = []

    shutdown = stop
