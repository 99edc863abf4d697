"""The lease heartbeat: one thread per process renews the leases of the runs and items
the process executes, in one statement per beat, and trades the open transaction of an
item that runs long for a lease (an ``OpenItemLease``).

Example::

    runtime.leases.track(run_id, ctx.lease)     # while the body runs
    runtime.leases.untrack(run_id)
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
from typing import TYPE_CHECKING

from celery_durable.body.context import LeaseClock
from celery_durable.core.retry import backoff
from celery_durable.engine.liveness import watch_proof
from celery_durable.store import ProofOfLife
from celery_durable.store.areas import ITEM_LEASES, REPORTS_CLEARED, OpenItemLease
from celery_durable.store.db.outage import describe, is_unreachable, summary

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.worker")


class FailureLog:
    """Consecutive failures of one background loop, logged once per backoff step.

    The 1st, 2nd, 4th, 8th, ... failure in a row is logged, not every attempt: one line
    when the database is unreachable (it names the database, without the password), with
    the traceback for any other error. The first success afterwards logs one line.
    """

    def __init__(self, runtime: RuntimeView, what: str) -> None:
        self.runtime = runtime
        self.what = what
        self.count = 0

    def failed(self, exc: BaseException, next_try: float) -> None:
        self.count += 1
        if self.count & (self.count - 1):
            return  # not a power of two: this backoff step was logged already
        where = f"{self.what} failed ({self.count} in a row; next try in {next_try:.1f}s)"
        if is_unreachable(exc):
            url = describe(self.runtime.store.url)
            logger.error("%s: the database %s is unreachable: %s", where, url, summary(exc))
            return
        try:
            self.runtime.store.raise_if_tables_missing(exc)
        except Exception as explained:  # noqa: BLE001 - log the clearer message
            # Nothing changes until someone migrates: said once, not per backoff step.
            if self.count == 1:
                logger.error("%s: %s; workflow deliveries are kept until then", where, explained)
            return
        logger.error("%s", where, exc_info=exc)

    def succeeded(self) -> None:
        if self.count:
            logger.warning("%s works again after %d failure(s)", self.what, self.count)
        self.count = 0


_KEEPERS: weakref.WeakSet[LeaseKeeper] = weakref.WeakSet()


def _reset_keepers_after_fork() -> None:
    for keeper in list(_KEEPERS):
        keeper._reset_after_fork()


os.register_at_fork(after_in_child=_reset_keepers_after_fork)


class LeaseKeeper:
    """Renews the leases of the runs this process executes, one statement per beat."""

    def __init__(self, runtime: RuntimeView) -> None:
        self.runtime = runtime
        self._pid = -1
        self._owner = ""
        self._proof: ProofOfLife | None = None
        self._proof_taken = False
        self._runs: Counter[str] = Counter()
        self._clocks: dict[str, list[LeaseClock]] = {}
        # Items this process runs: (run id, step index, item, claim token).
        self._items: set[tuple[str, int, int, str]] = set()
        # Items this process runs in an open transaction, and since when (monotonic).
        self._open: dict[OpenItemLease, float] = {}
        self._claims = itertools.count(1)
        # Settled runs whose report to Celery is made: their outbox entries, cleared a
        # batch per beat.
        self._reported: list[str] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._failures = FailureLog(runtime, "lease heartbeat")
        _KEEPERS.add(self)

    @property
    def owner(self) -> str:
        """This process's owner id, recorded on the runs it claims; it says whether the
        process holds a proof of life (``store.proof_of_life``)."""
        if self._pid != os.getpid():
            self._reset_after_fork()
        if not self._owner:
            base = f"{socket.gethostname()}:{self._pid}:{uuid.uuid4().hex[:8]}"
            self._proof = self.runtime.store.proof_of_life(base)
            self._owner = base if self._proof is None else self._proof.owner
        return self._owner

    def prove_alive(self, tries: int = 5) -> bool:
        """Hold the proof of life before a claim records this process's owner id: a run
        is never leased to an owner that claims one and holds none. False: its key was
        busy each time (a claimant checking it); the claim waits. Raises when the
        database is unreachable. No round trip once held."""
        self.owner  # noqa: B018 - resets state in a freshly forked child
        proof = self._proof
        if proof is None:
            return True
        for attempt in range(tries):
            if proof.hold():
                if not self._proof_taken:
                    self._proof_taken = True
                    watch_proof(proof, self._stop)
                return True
            time.sleep(0.05 * (attempt + 1))
        return False

    def _reset_after_fork(self) -> None:
        # The parent's proof of life is its own: its connection is left alone (closing
        # it here would end the parent's session), the child takes one of its own.
        self._pid = os.getpid()
        self._owner = ""
        self._proof = None
        self._proof_taken = False
        self._runs = Counter()
        self._clocks = {}
        self._items = set()
        self._open = {}
        self._claims = itertools.count(1)
        self._reported = []
        self._thread = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._failures = FailureLog(self.runtime, "lease heartbeat")

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

    def reported(self, run_id: str) -> None:
        """The run's report to Celery is made: its outbox entry is cleared at the next
        beat, with the others of that beat, in one statement."""
        self.owner  # noqa: B018 - resets state in a freshly forked child
        with self._lock:
            self._reported.append(run_id)
            self._start_beating()

    def _clear_reported(self) -> None:
        with self._lock:
            reported, self._reported = self._reported, []
        try:
            REPORTS_CLEARED.of(self.runtime.store).clear_reported(reported)
        except Exception:
            with self._lock:  # tried again at the next beat; the sweeper checks meanwhile
                self._reported.extend(reported)
            raise

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

    def track_open_item(self, opened: OpenItemLease) -> None:
        """An item run in its open transaction: converted to a claim after a beat."""
        self.owner  # noqa: B018 - resets state in a freshly forked child
        with self._lock:
            self._open[opened] = time.monotonic()
            self._start_beating()

    def untrack_open_item(self, opened: OpenItemLease) -> None:
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
            if opened.convert(owner, self.runtime.config.lock_timeout):
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
        config = self.runtime.config
        period = config.lock_timeout / 3
        delay = period
        while not self._stop.wait(delay):
            delay = period
            store = self.runtime.store
            try:
                self._convert_long_items(period)
                self._clear_reported()
                runs, items = self.running(), self.items()
                if not runs and not items:
                    continue
                renewed_runs = store.renew_leases(self._owner, runs, config.lock_timeout)
                renewed = len(renewed_runs)
                renewed += ITEM_LEASES.of(store).renew_item_leases(items, config.lock_timeout)
            except Exception as exc:
                # Retry sooner than a beat (the leases are running out), backing off up to
                # one beat: never renewing less often than normal, never hammering.
                delay = backoff(period / 8, self._failures.count + 1, period)
                self._failures.failed(exc, delay)
                continue
            self._failures.succeeded()
            self._interrupt_cancelled([run for run, asked in renewed_runs.items() if asked])
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

    def _interrupt_cancelled(self, run_ids: list[str]) -> None:
        """Runs asked to cancel while their bodies run: an async body is interrupted at
        its await (a plain body finds out at its next write)."""
        if not run_ids:
            return
        with self._lock:
            clocks = [clock for run in run_ids for clock in self._clocks.get(run, ())]
        for clock in clocks:
            clock.cancel_requested()

    def release_all(self) -> list[str]:
        """Give back this process's leases (process exit): others resume at once."""
        self._stop.set()
        if self._pid != os.getpid():
            return []
        try:
            released = self.runtime.store.release_owner(self._owner, self.running())
            ITEM_LEASES.of(self.runtime.store).release_items(self.items())
            self._clear_reported()
        except Exception:
            logger.exception("could not give back the leases of %s", self._owner)
            return []
        finally:
            if self._proof is not None:
                self._proof.release()
        if released:
            logger.warning(
                "gave back the leases of %d run(s) on exit: %s", len(released), ", ".join(released)
            )
        return released
