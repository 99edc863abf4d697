"""Liveness: a run whose owner died is taken over in about a second, not after its lease.

Each process that claims runs holds a proof of life (``store/liveness.py``: a session
lock that Postgres drops with the process's connection). A claimant that finds a lease
whose owner's lock no session holds may take the run over at once, but a missing lock
has two causes: the owner died, or the server dropped its connection (a restart,
``pg_terminate_backend``, an idle killer, a proxy that fell over) and the owner, alive,
takes its lock again a moment later. So a claimant acts only

- on an owner it saw gone twice, ``CONFIRM_AFTER`` seconds apart (a live owner's watcher,
  ``watch_proof``, notices its session ended without a round trip and takes the lock again
  well within that), and
- when it lost no connection of its own for two leases: a server that dropped every
  session dropped the claimant's too, and then leases decide, as without liveness.

Example::

    gone = GoneOwners(runtime)
    runtime.store.sweep_due_runs(..., gone_owners=gone.confirmed())
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from celery_durable.store import Claim, ProofOfLife

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.worker")

# Seconds between the two sightings of a missing proof of life that prove its owner dead.
CONFIRM_AFTER = 0.5
# How often the sweeper looks for dead owners between its sweeps.
LOOK_EVERY = 0.25
# How often an idle proof of life is checked with a round trip (the watcher hears a
# session ended by the server without one), and retried while it can't be taken.
CHECK_EVERY = 5.0
RETAKE_EVERY = 0.1


def lease_window(runtime: RuntimeView) -> float:
    """How far ahead a live lease runs (a renewal can land as a sweep starts), and how long
    a lost connection of this process keeps it from trusting a missing proof of life."""
    return 2 * runtime.config.lock_timeout


class GoneOwners:
    """The owners this process saw without their proof of life, and since when."""

    def __init__(self, runtime: RuntimeView) -> None:
        self.runtime = runtime
        self._since: dict[str, float] = {}

    def confirmed(self) -> list[str]:
        """Look again: the owners seen gone now and ``CONFIRM_AFTER`` s ago or more."""
        store, window = self.runtime.store, lease_window(self.runtime)
        if not store.liveness_trusted(window):
            self._since.clear()
            return []
        gone = store.find_gone_owners(window)
        now = time.monotonic()
        if not store.liveness_trusted(window):  # its checkout replaced a dropped connection
            self._since.clear()
            return []
        self._since = {owner: self._since.get(owner, now) for owner in gone}
        return sorted(o for o, since in self._since.items() if now - since >= CONFIRM_AFTER)

    def next_look_in(self) -> float | None:
        """Seconds until a suspect can be confirmed; None: no suspect."""
        if not self._since:
            return None
        return max(0.0, min(self._since.values()) + CONFIRM_AFTER - time.monotonic())


def take_over_from_gone_owner(runtime: RuntimeView, run_id: str, owner: str) -> Claim | None:
    """A delivery of a run leased to another owner (RabbitMQ redelivers a dead worker's
    messages at once): if that owner's proof of life is gone now and ``CONFIRM_AFTER``
    s later, take the run over. Waits that long only when the owner looks gone."""
    store, config = runtime.store, runtime.config
    window = lease_window(runtime)
    if not store.liveness_trusted(window):
        return None
    gone = store.gone_owner_of_run(run_id, window)
    if gone is None or gone == owner:
        return None
    time.sleep(CONFIRM_AFTER)
    if not store.liveness_trusted(window):
        return None
    claim = store.take_over_run(
        run_id, owner, gone, config.lock_timeout, config.max_recoveries, quiet_for=window
    )
    if claim is None:  # a sweeper was first: the run is pending again
        return store.claim_run(run_id, owner, config.lock_timeout, config.max_recoveries)
    logger.warning(
        "took workflow run %s over from %s, whose proof of life is gone (the process "
        "died) while its lease still ran",
        run_id,
        gone,
    )
    return claim


def watch_proof(proof: ProofOfLife, stop: threading.Event) -> threading.Thread:
    """Keep ``proof`` held: hear the server end its session and take the lock again at
    once (a claimant confirms a missing lock only ``CONFIRM_AFTER`` s later)."""

    def run() -> None:
        while not stop.is_set() and not proof.released:
            proof.wait_for_news(CHECK_EVERY)
            if stop.is_set() or proof.released:
                return
            try:
                held = proof.check()
            except Exception as exc:  # noqa: BLE001 - unreachable: try again shortly
                logger.debug("could not take the proof of life %s again: %s", proof.owner, exc)
                held = False
            if not held:
                stop.wait(RETAKE_EVERY)

    thread = threading.Thread(target=run, name="celery_durable-proof-of-life", daemon=True)
    thread.start()
    return thread
