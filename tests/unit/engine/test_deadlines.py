"""Deadlines (engine/deadlines.py) on the embedded default: the sweep cancels a run past
its deadline ("deadline exceeded"); a child inherits what is left of its parent's; resume
and fork take a new one; a negative timeout is refused naming it."""

from __future__ import annotations

import pytest

import celery_durable as cd
from celery_durable import InvalidArgument, WorkflowCancelled, WorkflowStatus
from tests.support.waiting import wait_until


def test_the_sweep_cancels_a_waiting_run_past_its_deadline(durable):
    @durable.workflow(timeout="50ms")
    def approval() -> object:
        return cd.wait_for_signal("approved")

    handle = approval.delay()
    assert handle.status() is WorkflowStatus.WAITING
    wait_until(
        lambda: durable.runtime.sweeper.sweep_once() >= 0 and handle.ready(),
        10,
        0.05,
        "the deadline",
    )
    with pytest.raises(WorkflowCancelled, match="deadline exceeded"):
        handle.get(timeout=1)
    handle.resume(timeout="1h")  # a new deadline: it waits again, not cancelled at once
    durable.runtime.sweeper.sweep_once()
    assert handle.status() is WorkflowStatus.WAITING
    record = handle.record()
    assert record.deadline_at is not None and record.deadline_at > record.created_at + 3000
    fork = handle.fork(from_step=0)  # no timeout given: the fork has no deadline
    assert fork.record().deadline_at is None


def test_a_child_inherits_what_is_left_of_its_parent_s_deadline(durable):
    @durable.workflow
    def child() -> object:
        return cd.wait_for_signal("go")

    @durable.workflow(timeout=600)
    def parent() -> object:
        return child.start_child(run_id="the-child").result()

    started = parent.delay()
    kid = durable.get_handle("the-child").record()
    assert kid.deadline_at is not None
    assert abs(kid.deadline_at - started.record().deadline_at) < 5  # the parent's, not anew
    with pytest.raises(InvalidArgument, match="timeout"):
        child.apply_async(timeout=-1)
