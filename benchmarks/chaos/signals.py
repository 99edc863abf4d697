"""The driver's signals: sent once, and sent again only on evidence that they can't arrive.

A signal goes either through ``handle.signal()`` (stored in the database before the call
returns) or through ``durable.send_signal()`` (the broker only; a worker stores it). It is
sent again, with the same idempotency key, when:

- the send raised (the producer saw the failure: Postgres or the broker was cut off);
- a broker-only signal is not stored after a while and the broker restart of the run
  dropped this run's messages after it was sent (a Redis without persistence loses them);
- a broker-only signal is not stored and a worker's log shows that its message's task
  raised (acknowledged without storing it). That one is also counted as *dropped by a
  worker*: the library lost a signal it had accepted, which the suite counts as lost.

Example::

    signals = Signals(run)           # run: a SignalDriver, e.g. the ChaosRun
    signals.send(workflow_plan)      # from the agenda, once the run has started
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchmarks.chaos.plan import SIGNAL, WorkflowPlan
from benchmarks.chaos.verdict import Observer
from benchmarks.chaos.workers import ChaosWorker
from celery_durable import WorkflowHandle

RETRY_EVERY = 0.5
CHECK_AFTER = 8.0
CHECK_AGAIN = 4.0
MAX_SENDS = 20


class SignalDriver(Protocol):
    """What the signals need of the run that owns them (``ChaosRun`` is one).

    Declared here, not imported from ``run``, because ``run`` imports this module: the
    imports go one way."""

    @property
    def app(self) -> Any: ...  # a module, imported only once the run has set its environment

    @property
    def observer(self) -> Observer | None: ...

    @property
    def workers(self) -> Sequence[ChaosWorker]: ...

    @property
    def deadline(self) -> float: ...

    def now(self) -> float: ...

    def at(self, when: float, label: str, action: Callable[[], object]) -> None: ...


@dataclass
class _Sent:
    send: int
    at: float
    message_id: str | None = None


@dataclass
class SignalLog:
    resends: list[dict[str, Any]] = field(default_factory=list)
    send_errors: list[dict[str, Any]] = field(default_factory=list)
    dropped_by_worker: list[dict[str, Any]] = field(default_factory=list)


class Signals:
    def __init__(self, run: SignalDriver) -> None:
        self.run = run
        self.log = SignalLog()
        self.sent: dict[str, list[_Sent]] = {}
        self.broker_drops: list[float] = []
        self._blamed: set[str] = set()  # message ids already counted as dropped by a worker

    def send(self, wf: WorkflowPlan, send: int = 1, reason: str = "") -> None:
        run = self.run
        if send > 1:
            self.log.resends.append(
                {"id": wf.id, "via": wf.signal_via, "send": send, "at": run.now(), "why": reason}
            )
        payload = {"v": wf.payload}
        durable = run.app.durable
        try:
            if wf.signal_via == "handle":
                WorkflowHandle(durable, wf.id, "chaos.flow").signal(
                    SIGNAL, payload, idempotency_key=wf.signal_key
                )
                self.sent.setdefault(wf.id, []).append(_Sent(send, run.now()))
                return
            message_id = durable.send_signal(wf.id, SIGNAL, payload, idempotency_key=wf.signal_key)
        except Exception as exc:  # noqa: BLE001 - the producer saw it fail: send again
            self.log.send_errors.append({"id": wf.id, "send": send, "error": repr(exc)[:200]})
            if send < MAX_SENDS and run.now() < run.deadline:
                why = f"send {send} raised {type(exc).__name__}"
                run.at(
                    run.now() + RETRY_EVERY, f"signal {wf.id}", lambda: self.send(wf, send + 1, why)
                )
            return
        self.sent.setdefault(wf.id, []).append(_Sent(send, run.now(), message_id))
        run.at(run.now() + CHECK_AFTER, f"check {wf.id}", lambda: self.check(wf))

    def check(self, wf: WorkflowPlan) -> None:
        """A broker-only signal: stored yet? If not, look for evidence it can't arrive."""
        run = self.run
        assert run.observer is not None
        if wf.signal_key in run.observer.signals() or wf.id in self._finished():
            return
        sends = self.sent.get(wf.id, [])
        last = sends[-1] if sends else None
        failed = self._failed_in_worker(sends)
        if failed:
            self.log.dropped_by_worker.append({"id": wf.id, "log": failed})
            why = "a worker acknowledged its message without storing it"
        elif last is not None and any(at > last.at for at in self.broker_drops):
            why = "the broker restart dropped its message"
        else:
            if run.now() < run.deadline:
                run.at(run.now() + CHECK_AGAIN, f"check {wf.id}", lambda: self.check(wf))
            return
        if len(sends) < MAX_SENDS and run.now() < run.deadline:
            self.send(wf, len(sends) + 1, why)

    def _finished(self) -> set[str]:
        assert self.run.observer is not None
        return {
            run_id
            for run_id, row in self.run.observer.runs().items()
            if row.status in ("SUCCEEDED", "FAILED", "CANCELLED")
        }

    def _failed_in_worker(self, sends: list[_Sent]) -> str | None:
        """The log line of a worker whose receive task raised for one of these messages."""
        for sent in sends:
            if sent.message_id is None or sent.message_id in self._blamed:
                continue
            wanted = f"celery_durable.signal[{sent.message_id}] raised"
            for path in self._logs():
                text = path.read_text(errors="replace") if path.exists() else ""
                for line in text.splitlines():
                    if wanted in line:
                        self._blamed.add(sent.message_id)
                        return f"{path.name}: {line[:400]}"
        return None

    def _logs(self) -> list[Path]:
        return [p for w in list(self.run.workers) for p in list(w.log_paths)]
