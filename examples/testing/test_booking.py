"""Testing workflows without a worker or a broker: ``durable_eager`` runs them in-process
and its clock fires their timers. Run: ``python -m pytest examples/testing``."""

from __future__ import annotations

import pytest
from booking import RELEASED, booking, durable, reserve

import celery_durable as cd
from celery_durable.testing import EagerWorkflows, eager_workflows


# --8<-- [start:fixture]
def test_an_approved_booking_is_charged_after_a_days_grace(durable_eager: EagerWorkflows):
    handle = booking.delay("b-1")  # runs now, in-process, up to its first wait
    assert handle.status() is cd.WorkflowStatus.WAITING  # for the approval
    handle.signal("approval", {"by": "ann"})  # the body goes on at once
    assert handle.status() is cd.WorkflowStatus.WAITING  # for its day of grace
    assert durable_eager.clock.advance(86400 - 60) == 0  # a minute short: nothing woken
    assert durable_eager.clock.advance(60) == 1  # due: the run goes on, in-process
    assert handle.get(timeout=10) == {"status": "confirmed", "by": "ann", "receipt": "receipt-b-1"}


def test_an_unanswered_booking_expires_after_an_hour(durable_eager: EagerWorkflows):
    handle = booking.delay("b-2")
    durable_eager.clock.advance(3600)  # the signal's timeout: wait_for_signal returns None
    assert handle.get(timeout=10) == {"status": "expired"}
    assert "hold-b-2" in RELEASED
    # --8<-- [end:fixture]


# --8<-- [start:context]
def test_a_booking_cancelled_in_its_grace_day_is_never_charged():
    with eager_workflows(durable) as kit:  # without the fixture: any Durable, any app
        handle = booking.delay("b-3")
        handle.signal("approval", {"by": "bob"})
        handle.cancel("changed my mind")  # a waiting run is cancelled at once
        with pytest.raises(cd.WorkflowCancelled, match="changed my mind"):
            handle.get(timeout=10)
        assert kit.clock.advance(86400) == 0  # its timer went with it
    assert durable.app.conf.task_always_eager is False  # restored when the block ends


def test_a_step_outside_a_workflow_is_a_plain_call():
    # A step called outside a workflow is a plain call: nothing stored, no retries.
    assert reserve("b-4") == "hold-b-4"
    # --8<-- [end:context]
