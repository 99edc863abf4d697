"""Moving a namespace's timers (the testing clock's mechanism) on the embedded default: a
sleep, a signal's timeout and a workflow deadline all come due as if the clock had moved."""

from __future__ import annotations

import celery_durable as cd
from celery_durable import WorkflowStatus


def test_bringing_the_timers_forward_makes_a_sleep_and_a_signal_timeout_due(durable):
    @durable.workflow
    def patient() -> str:
        cd.sleep(3600)
        return str(cd.wait_for_signal("nudge", timeout=600, default="timed out"))

    handle = patient.delay()
    assert handle.status() is WorkflowStatus.WAITING
    # A minute short of due, not a second: a loaded machine can spend a second before the sweep.
    assert durable.runtime.store.waits.bring_timers_forward(3540) == 1
    assert durable.runtime.sweeper.sweep_once() == 0 and handle.status() is WorkflowStatus.WAITING
    durable.runtime.store.waits.bring_timers_forward(60)
    durable.runtime.sweeper.sweep_once()
    assert handle.status() is WorkflowStatus.WAITING  # now for the signal, 10 minutes
    durable.runtime.store.waits.bring_timers_forward(600)
    durable.runtime.sweeper.sweep_once()
    assert handle.get(timeout=5) == "timed out"


def test_a_deadline_comes_due_when_the_timers_move(durable):
    @durable.workflow(timeout="1h")
    def waits_forever() -> None:
        cd.wait_for_signal("never")

    handle = waits_forever.delay()
    assert handle.status() is WorkflowStatus.WAITING
    durable.runtime.store.waits.bring_timers_forward(3601)
    durable.runtime.sweeper.sweep_once()
    assert handle.status() is WorkflowStatus.CANCELLED
    assert "deadline exceeded" in (handle.record().cancel_reason or "")
