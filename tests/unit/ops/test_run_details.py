"""``durable show`` says the same in text and in JSON, and as ``handle.record()`` does: the
attempt (``record().attempt``), each step's status (a wait that a finished run never got
past is "not reached") and the cancel reason, for runs that wait, were cancelled while
waiting, or succeeded."""

from __future__ import annotations

import json
import types
from typing import Any

from click.testing import CliRunner

import celery_durable as cd
from celery_durable import Durable, WorkflowHandle, WorkflowStatus
from celery_durable.cli import durable as durable_group


def shown(durable: Durable, run_id: str) -> tuple[str, dict[str, Any]]:
    obj = types.SimpleNamespace(app=durable.app)
    text = CliRunner().invoke(durable_group, ["show", run_id], obj=obj)
    assert text.exit_code == 0, text.output
    as_json = CliRunner().invoke(durable_group, ["show", run_id, "--json"], obj=obj)
    assert as_json.exit_code == 0, as_json.output
    return text.output, json.loads(as_json.output)


def assert_they_agree(durable: Durable, handle: WorkflowHandle) -> tuple[str, dict[str, Any]]:
    text, js = shown(durable, handle.id)
    first = text.splitlines()[0]
    assert first.endswith(f"{js['status']}  attempt {js['attempt']}/{js['max_attempts']}")
    assert handle.record().attempt == js["attempt"]
    for step in js["steps"]:
        assert f"  step {step['index']}: {step['name']} {step['status']}" in text
    if js["cancel_reason"] is not None:
        assert js["cancel_reason"] in text
    return text, js


def test_show_says_the_same_in_text_and_json_and_as_the_record(durable):
    @durable.step(max_attempts=2)
    def reserve(order: int) -> int:
        return order

    @durable.workflow(max_attempts=3)
    def approval(order: int) -> str:
        reserve(order)
        decision = cd.wait_for_signal("approved")
        return f"approved by {decision['by']}"

    waiting = approval.delay(1)
    cancelled = approval.delay(2)
    succeeded = approval.delay(3)
    assert cancelled.cancel("customer left") is WorkflowStatus.CANCELLED
    succeeded.signal("approved", {"by": "ann"})
    assert succeeded.get(timeout=10) == "approved by ann"

    text, js = assert_they_agree(durable, waiting)
    assert js["status"] == "WAITING" and js["attempt"] == 1
    assert waiting.record().attempts == 0  # used up: the wait gave its attempt back
    assert [step["status"] for step in js["steps"]] == ["ok", "waiting"]

    text, js = assert_they_agree(durable, cancelled)
    assert js["cancel_reason"] == "customer left"
    assert "cancelled: customer left" in text
    assert [step["status"] for step in js["steps"]] == ["ok", "not reached"]
    assert "not reached (run cancelled while waiting)" in text

    text, js = assert_they_agree(durable, succeeded)
    assert js["status"] == "SUCCEEDED" and js["cancel_reason"] is None
    assert "cancel" not in text
