"""One broker's chaos run: proxies, workers, then starts and signals on the driver's agenda
while the fault injector (its own thread) breaks things, then the verdict and clean-up.

Everything the system under test does goes through two proxies (Postgres, broker) that
the run owns: workers and the driver's producer side (starts, signals). The observer and
the ledger reach Postgres and Redis directly. Every wait has a deadline.

Example::

    settings = Settings(quick=True, workflows=None, seed=1, database_url=PG, redis_url=REDIS,
                        amqp_url=AMQP, ledger_url=REDIS, log_dir=Path("/tmp/chaos"))
    run = ChaosRun(settings, "redis")
    report = run.run()        # dict: counters, details, fault log; cleans up after itself
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis
from sqlalchemy.engine import make_url

from benchmarks.chaos.faults import Agenda, FaultInjector, FaultTargets, progress
from benchmarks.chaos.plan import WorkflowPlan, make_plan, scale_for
from benchmarks.chaos.proxy import TcpProxy
from benchmarks.chaos.signals import Signals
from benchmarks.chaos.verdict import Observer, judge
from benchmarks.chaos.workers import (
    ChaosWorker,
    count_log_lines,
    delete_queues,
    drop_tables,
    pool_child_exits,
)

LOCK_TIMEOUT = 3.0
WORKERS = 2
RETRY_EVERY = 0.5


@dataclass(frozen=True)
class Settings:
    quick: bool
    workflows: int | None
    seed: int
    database_url: str  # SQLAlchemy postgresql+psycopg URL of the real server
    redis_url: str
    amqp_url: str
    ledger_url: str
    log_dir: Path
    pause_at_commit: bool = False  # pauses hit a pool process right after a step commit


def _via_port(url: str, port: int) -> str:
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


class ChaosRun:
    """One broker's run; ``run()`` returns its report and always cleans up."""

    def __init__(self, settings: Settings, broker: str) -> None:
        self.settings = settings
        self.broker = broker
        self.run_id = uuid.uuid4().hex[:8]
        self.prefix = f"chaos_{self.run_id}_"
        self.namespace = f"chaos-{self.run_id}"
        self.queue = f"celery_durable.chaos.{self.run_id}"
        self.signal_queue = f"{self.queue}.signals"
        self.broker_url = settings.redis_url if broker == "redis" else settings.amqp_url
        self.log_dir = settings.log_dir / f"{broker}-{self.run_id}"
        self.scale = scale_for(settings.quick, settings.workflows)
        self.plan = make_plan(self.scale, settings.seed, self.run_id, LOCK_TIMEOUT)
        self.direct_pg = make_url(settings.database_url).set(drivername="postgresql")
        self.ledger_key = f"chaos-ledger:{self.run_id}"
        self.agenda = Agenda()
        self.injector: FaultInjector | None = None
        self.workers: list[ChaosWorker] = []
        self.started: set[str] = set()
        self.signals = Signals(self)
        self.start_retries = 0
        self.retried_starts: set[str] = set()
        self.app: Any = None
        self.pg_proxy: TcpProxy | None = None
        self.broker_proxy: TcpProxy | None = None
        self.observer: Observer | None = None
        self.ledger = redis.Redis.from_url(settings.ledger_url, decode_responses=True)

    # -- the producer's agenda (starts, signals, checks) -------------------------------------

    def now(self) -> float:
        return self.agenda.now()

    def at(self, when: float, label: str, action: Callable[[], object]) -> None:
        self.agenda.at(when, label, action)

    # -- set-up and clean-up -----------------------------------------------------------------

    def _setup(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # The driver's own library logs (publish failures during outages) go to a file.
        handler = logging.FileHandler(self.log_dir / "driver.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
        pg = make_url(self.settings.database_url)
        broker = make_url(self.broker_url)
        default_port = 6379 if self.broker == "redis" else 5672
        self.pg_proxy = TcpProxy("postgres", (pg.host or "127.0.0.1", pg.port or 5432)).start()
        self.broker_proxy = TcpProxy(
            self.broker, (broker.host or "127.0.0.1", broker.port or default_port)
        ).start()
        store_url = (
            make_url(_via_port(self.settings.database_url, self.pg_proxy.port))
            .update_query_dict({"application_name": f"chaos_{self.run_id}", "connect_timeout": "3"})
            .render_as_string(hide_password=False)
        )
        env = {
            "CHAOS_BROKER_URL": _via_port(self.broker_url, self.broker_proxy.port),
            "CHAOS_QUEUE": self.queue,
            "CHAOS_LEDGER_URL": self.settings.ledger_url,
            "CHAOS_LEDGER_KEY": self.ledger_key,
            "CHAOS_CHECK_DATABASE_URL": self.direct_pg.render_as_string(hide_password=False),
            "CELERY_DURABLE_DATABASE_URL": store_url,
            "CELERY_DURABLE_TABLE_PREFIX": self.prefix,
            "CELERY_DURABLE_NAMESPACE": self.namespace,
            "CELERY_DURABLE_SIGNAL_QUEUE": self.signal_queue,
            "CELERY_DURABLE_LOCK_TIMEOUT": str(LOCK_TIMEOUT),
            "CELERY_DURABLE_POLL_INTERVAL": "0.2",
            "CELERY_DURABLE_DISPATCH_GRACE": "2",
            "CHAOS_PAUSE_AT_COMMIT": "1" if self.settings.pause_at_commit else "0",
        }
        os.environ.update(env)
        self.app = importlib.import_module("benchmarks.chaos.app")
        self.app.durable.migrate()
        self.observer = Observer(
            self.direct_pg.render_as_string(hide_password=False), self.prefix, self.namespace
        )
        self.workers = [
            ChaosWorker(i, self.run_id, env, self.log_dir, self.queue).start()
            for i in range(WORKERS)
        ]
        deadline = time.monotonic() + 90
        while not all(w.ready() for w in self.workers):
            for worker in self.workers:
                if not worker.alive:
                    raise RuntimeError(f"worker {worker.name} exited early:\n{worker.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError("chaos workers not ready within 90 s")
            time.sleep(0.1)
        progress(
            f"broker={self.broker} run {self.run_id}: {len(self.workers)} workers ready, "
            f"proxies pg:{self.pg_proxy.port} broker:{self.broker_proxy.port}, "
            f"logs in {self.log_dir}"
        )

    def _cleanup(self) -> dict[str, Any]:
        if self.injector is not None:
            self.injector.stop()
            self.injector.targets.observer.close()
        rcs = {w.name: w.stop() for w in self.workers}
        for proxy in (self.pg_proxy, self.broker_proxy):
            if proxy is not None:
                proxy.stop()
        if self.observer is not None:
            self.observer.close()
        if self.app is not None:
            self.app.durable.runtime.store.dispose()
        errors = []
        for what, action in (
            ("tables", lambda: drop_tables(self.direct_pg.render_as_string(False), self.prefix)),
            ("queues", lambda: delete_queues(self.broker_url, [self.queue, self.signal_queue])),
            ("ledger", lambda: self.ledger.delete(*self._ledger_keys())),
        ):
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - report, keep cleaning
                errors.append(f"{what}: {exc!r}")
        self.ledger.close()
        return {"shutdown_returncodes": rcs, "cleanup_errors": errors}

    def _ledger_keys(self) -> list[str]:
        names = ("exec", "rerun", "late_check", "check_failed", "pause_request", "paused")
        return [f"{self.ledger_key}:{name}" for name in names]

    # -- workflows and signals -----------------------------------------------------------------

    def _start(self, wf: WorkflowPlan) -> None:
        try:
            self.app.flow.apply_async((wf.seed, wf.kind), run_id=wf.id, if_exists="return")
        except Exception as exc:  # noqa: BLE001 - the store is cut off: try again
            self.start_retries += 1
            self.retried_starts.add(wf.id)
            if self.now() < self.deadline:
                self.at(self.now() + RETRY_EVERY, f"start {wf.id}", lambda: self._start(wf))
            if self.start_retries % 10 == 1:
                progress(f"start {wf.id} failed ({type(exc).__name__}); retrying")
            return
        self.started.add(wf.id)
        if wf.waits and wf.signal_at is not None:
            when = max(wf.signal_at, self.now())
            self.at(when, f"signal {wf.id}", lambda: self.signals.send(wf))

    # -- the run -----------------------------------------------------------------------------

    @property
    def deadline(self) -> float:
        return self.plan.last_fault_end + self.scale.stuck_after + self.scale.lost_after

    def _drive(self) -> list[str]:
        """Start, signal, inject; then wait for every run to finish (or the deadline)."""
        assert self.observer is not None and self.pg_proxy and self.broker_proxy
        self.agenda = Agenda()
        targets = FaultTargets(
            self.broker,
            self.broker_url,
            [self.queue, self.signal_queue],
            self.workers,
            self.pg_proxy,
            self.broker_proxy,
            self.ledger,
            self.ledger_key,
            self.settings.pause_at_commit,
            Observer(self.direct_pg.render_as_string(False), self.prefix, self.namespace),
        )
        self.injector = injector = FaultInjector(targets, self.plan.faults, self.agenda.t0)
        self.signals.broker_drops = injector.broker_drops
        for wf in self.plan.workflows:
            self.at(wf.start_at, f"start {wf.id}", functools.partial(self._start, wf))
        injector.start()
        stuck: list[str] | None = None
        next_look = 0.0
        while self.now() < self.deadline:
            self.agenda.run_due()
            if self.now() >= next_look:
                next_look = self.now() + 0.5
                if self.agenda.pending == 0 and injector.over:
                    unfinished = self.observer.unfinished()
                    if not unfinished and len(self.started) == len(self.plan.workflows):
                        break
                    if stuck is None and self.now() >= max(injector.ended) + self.scale.stuck_after:
                        stuck = unfinished
                        progress(f"{len(stuck)} run(s) stuck {self.scale.stuck_after:.0f}s on")
            time.sleep(min(self.agenda.next_in(), 0.05))
        if stuck is None:  # the deadline passed first: whatever is unfinished was stuck too
            stuck = self.observer.unfinished()
        return stuck

    def run(self) -> dict[str, Any]:
        began = time.monotonic()
        report: dict[str, Any] = {"broker": self.broker, "run_id": self.run_id}
        try:
            self._setup()
            stuck = self._drive()
            report.update(self._verdict(stuck))
        finally:
            report.update(self._cleanup())
            report["duration_s"] = round(time.monotonic() - began, 1)
        return report

    def _verdict(self, stuck: list[str]) -> dict[str, Any]:
        assert self.observer is not None
        verdict = judge(
            self.plan,
            self.started,
            self.observer.runs(),
            self.observer.signals(),
            self.observer.work_steps(),
            self.ledger.hgetall(f"{self.ledger_key}:exec"),
            self.ledger.lrange(f"{self.ledger_key}:rerun", 0, -1),
            stuck,
            [d["id"] for d in self.signals.log.dropped_by_worker],
        )
        assert self.injector is not None
        self_exits = self.injector.self_exits
        logs = [p for w in self.workers for p in w.log_paths]
        child_exits = pool_child_exits(logs)
        counters = verdict.counters()
        return {
            "workflows": len(self.plan.workflows),
            "steps": len(self.plan.workflows) * 5,
            "faults": len(self.injector.log),
            **counters,
            "worker_self_exits": len(self_exits) + len(child_exits),
            "signals_resent": len({r["id"] for r in self.signals.log.resends}),
            "signal_sends_repeated": len(self.signals.log.resends),
            "starts_retried": len(self.retried_starts),
            "start_attempts_failed": self.start_retries,
            "step_executions": verdict.step_executions,
            "reexecutions_before_commit": verdict.reexecutions,
            "max_attempts_used": verdict.max_attempts_used,
            "details": {
                "lost": verdict.lost,
                "lost_signals": verdict.lost_signals,
                "stuck": verdict.stuck,
                "wrong": verdict.wrong,
                "rerun_after_commit": verdict.rerun,
                "worker_self_exits": [asdict(e) for e in self_exits],
                "pool_child_exits": child_exits,
                "signals_resent": self.signals.log.resends,
                "signal_send_errors": self.signals.log.send_errors,
                "signals_dropped_by_worker": self.signals.log.dropped_by_worker,
                "check_failed": self.ledger.lrange(f"{self.ledger_key}:check_failed", 0, -1),
                "paused_inside_check": [
                    json.loads(r)
                    for r in self.ledger.lrange(f"{self.ledger_key}:late_check", 0, -1)
                ],
            },
            "fault_log": self.injector.log,
            "proxies": {
                "postgres": asdict(self.pg_proxy.stats) if self.pg_proxy else None,
                "broker": asdict(self.broker_proxy.stats) if self.broker_proxy else None,
            },
            "log_counts": count_log_lines(logs),
            "log_dir": str(self.log_dir),
            "plan": self.plan.describe(),
        }
