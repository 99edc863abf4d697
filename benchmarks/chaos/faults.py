"""The fault injector: its own thread and agenda, so faults start and end on time even while
the driver's producer side is blocked by the outage it is suffering.

It owns the worker processes during a run: kills (and restarts a second later), pauses
and resumes them, and watches for workers that exit on their own (restarted too, and
reported). Outages are the proxies' ``cut()`` / ``reopen()``.

Example::

    agenda = Agenda()
    agenda.at(1.5, "hello", lambda: print("1.5 s after the agenda was created"))
    agenda.run_due()                       # runs what is due now; call it in a loop
    injector = FaultInjector(targets, plan.faults, agenda.t0)   # targets: FaultTargets
    injector.start(); ...; injector.stop()
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from benchmarks.chaos.plan import FaultPlan
from benchmarks.chaos.proxy import TcpProxy
from benchmarks.chaos.verdict import Observer
from benchmarks.chaos.workers import ChaosWorker, SelfExit, drop_redis_state

RESTART_AFTER_KILL = 1.0
SELF_PAUSE_WAIT = 5.0
BUSY_WAIT = 3.0  # how long a kill or pause waits for a worker that holds a run


def progress(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Agenda:
    """Actions at offsets (seconds) from ``t0``, run in time order by ``run_due()``."""

    def __init__(self, t0: float | None = None) -> None:
        self.t0 = time.monotonic() if t0 is None else t0
        self._heap: list[tuple[float, int, str, Callable[[], object]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def at(self, when: float, label: str, action: Callable[[], object]) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), label, action))

    @property
    def pending(self) -> int:
        return len(self._heap)

    def next_in(self, default: float = 0.05) -> float:
        return max(0.0, self._heap[0][0] - self.now()) if self._heap else default

    def run_due(self) -> None:
        while self._heap and self._heap[0][0] <= self.now():
            _, _, label, action = heapq.heappop(self._heap)
            try:
                action()
            except Exception:  # noqa: BLE001 - one event's failure must not end the run
                progress(f"event {label} failed:\n{traceback.format_exc()}")


@dataclass
class FaultTargets:
    """What the injector acts on."""

    broker: str
    broker_url: str  # the real broker (direct), for the Redis restart emulation
    queues: list[str]
    workers: list[ChaosWorker]
    pg_proxy: TcpProxy
    broker_proxy: TcpProxy
    ledger: redis.Redis
    ledger_key: str
    pause_at_commit: bool
    observer: Observer  # the injector's own (direct) connection, to find busy workers


class FaultInjector(threading.Thread):
    """Injects ``faults`` at their offsets from ``t0``; watches the workers meanwhile."""

    def __init__(self, targets: FaultTargets, faults: list[FaultPlan], t0: float) -> None:
        super().__init__(name="chaos-faults", daemon=True)
        self.targets = targets
        self.faults = faults
        self.agenda = Agenda(t0)
        self.log: list[dict[str, Any]] = []
        self.ended: list[float] = []
        self.broker_drops: list[float] = []
        self.self_exits: list[SelfExit] = []
        self._stop_event = threading.Event()

    @property
    def over(self) -> bool:
        """Every fault injected and ended (outages over, paused workers resumed)."""
        return len(self.ended) == len(self.faults)

    def run(self) -> None:
        for fault in self.faults:
            self.agenda.at(fault.at, f"fault {fault.kind}", functools.partial(self.inject, fault))
        next_look = 0.0
        while not self._stop_event.is_set():
            self.agenda.run_due()
            if self.agenda.now() >= next_look:
                next_look = self.agenda.now() + 0.25
                self.monitor()
            self._stop_event.wait(min(self.agenda.next_in(), 0.05))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)

    # -- faults -----------------------------------------------------------------------------

    def pick(self, preferred: int | None) -> tuple[ChaosWorker, int]:
        """A running, unpaused worker, one holding runs if any does (preferred first);
        with how many runs it holds."""
        owners = self.targets.observer.running_owners()
        held = [int(owner.split(":")[1]) for owner in owners if owner.count(":") >= 2]
        order = sorted(self.targets.workers, key=lambda w: w.index != preferred)
        up = [w for w in order if w.alive and not w.paused]
        for worker in up:
            pids = worker.pids()
            busy = sum(1 for pid in held if pid in pids)
            if busy:
                return worker, busy
        return (up or order)[0], 0

    def inject(self, fault: FaultPlan, until: float | None = None) -> None:
        """Inject ``fault`` now; a kill or a pause waits (up to BUSY_WAIT s) for a worker
        that holds a run, so that it interrupts one."""
        t, now = self.targets, self.agenda.now()
        worker, busy = self.pick(fault.target) if fault.kind in ("kill", "pause") else (None, 0)
        if worker is not None and not busy and not t.pause_at_commit:
            until = now + BUSY_WAIT if until is None else until
            if now < until:
                again = functools.partial(self.inject, fault, until)
                self.agenda.at(now + 0.05, f"fault {fault.kind}", again)
                return
        entry: dict[str, Any] = {"kind": fault.kind, "at": round(now, 2)}
        entry["duration"] = fault.duration
        end = now + fault.duration
        if fault.kind == "kill" and worker is not None:
            entry.update(worker=worker.name, runs_held=busy)
            worker.kill()
            self.agenda.at(now + RESTART_AFTER_KILL, f"restart {worker.index}", worker.start)
            self.ended.append(now)
        elif fault.kind == "pause" and t.pause_at_commit:
            t.ledger.set(f"{t.ledger_key}:pause_request", 1)
            self.await_self_pause(entry, fault.duration, now + SELF_PAUSE_WAIT)
        elif fault.kind == "pause" and worker is not None:
            entry.update(worker=worker.name, runs_held=busy)
            paused = worker
            paused.pause()
            self.agenda.at(end, "resume", lambda: self.end(paused.resume))
        elif fault.kind == "broker":
            entry["connections_cut"] = t.broker_proxy.cut()
            if t.broker == "redis":
                # The real Redis here runs without persistence: a restart loses this.
                client = redis.Redis.from_url(t.broker_url)
                entry["messages_dropped"] = drop_redis_state(client, t.queues)
                client.close()
                self.broker_drops.append(now)
            self.agenda.at(end, "broker back", lambda: self.end(t.broker_proxy.reopen))
        else:
            entry["connections_cut"] = t.pg_proxy.cut(crash=fault.kind == "pg_crash")
            self.agenda.at(end, "postgres back", lambda: self.end(t.pg_proxy.reopen))
        self.log.append(entry)
        progress(f"fault {len(self.log)}/{len(self.faults)}: {entry}")

    def await_self_pause(self, entry: dict[str, Any], duration: float, until: float) -> None:
        """--pause-at-commit: a pool process stops itself after its next first-step commit."""
        t, now = self.targets, self.agenda.now()
        paused = t.ledger.lpop(f"{t.ledger_key}:paused")
        if paused is not None:
            info = json.loads(str(paused))
            entry.update(pid=info["pid"], after_step=info.get("step_index"))
            entry["run"] = info["run_id"]
            self.agenda.at(now + duration, "resume", lambda: self.end(lambda: _cont(info["pid"])))
        elif now < until:
            again = lambda: self.await_self_pause(entry, duration, until)  # noqa: E731
            self.agenda.at(now + 0.02, "await pause", again)
        else:
            t.ledger.delete(f"{t.ledger_key}:pause_request")
            entry["skipped"] = f"no first step committed within {SELF_PAUSE_WAIT:.0f} s"
            self.ended.append(now)

    def end(self, action: Callable[[], None]) -> None:
        action()
        self.ended.append(self.agenda.now())

    def monitor(self) -> None:
        """Workers that exited without the suite killing or stopping them: report, restart."""
        for worker in self.targets.workers:
            exit_ = worker.self_exit(self.agenda.now())
            if exit_ is not None:
                self.self_exits.append(exit_)
                progress(f"worker {exit_.worker} exited by itself (rc {exit_.returncode})")
                worker.start()


def _cont(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:  # killed with its worker meanwhile
        pass
