"""Updates on the embedded default (SQLite, eager): the body takes a request with
``wait_for_update`` and answers it with ``reply`` or ``reject``, each a step; a validator
refuses before anything is recorded; a run that ends without answering leaves its caller
UpdateNotHandled; an idempotency key finds the first request and its answer; an async
body awaits the wait, and an asyncio caller awaits ``aupdate``."""

from __future__ import annotations

from typing import Any

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError

import celery_durable as cd
from celery_durable import (
    InvalidArgument,
    UpdateNotHandled,
    UpdateRejected,
    WorkflowAlreadyCompleted,
    WorkflowNotFound,
    WorkflowStatus,
)
from tests.support.event_loop import run_apart
from tests.support.waiting import wait_until

WAIT = "celery_durable.update:add_item"
REPLY = "celery_durable.update_reply:add_item"
REJECT = "celery_durable.update_reject:add_item"


def make_cart(durable: Any, asked: list[Any]) -> Any:
    @durable.workflow(max_attempts=1)
    def cart(limit: int) -> list:
        items: list = []
        while len(items) < limit:
            req = cd.wait_for_update("add_item", timeout=3600)
            if req is None:
                break
            asked.append(req.payload)  # each request reaches the body's code once per pass
            if req.payload in items:
                req.reject(f"{req.payload} is in the cart already")
                continue
            items.append(req.payload)
            req.reply({"count": len(items)})
        return items

    return cart


def statuses(durable: Any, run_id: str) -> list[tuple[str, str]]:
    return [(u.name, u.status) for u in durable.runtime.store.updates.run_updates(run_id)]


def test_an_update_is_answered_rejected_and_never_asked_again_on_replay(durable):
    asked: list[Any] = []
    cart = make_cart(durable, asked)
    handle = cart.delay(2)
    assert handle.status() is WorkflowStatus.WAITING
    assert handle.record().wait_signal == WAIT  # suspended: no worker held
    assert handle.update("add_item", "apple") == {"count": 1}
    with pytest.raises(UpdateRejected) as rejected:
        handle.update("add_item", "apple")
    assert rejected.value.reason == "apple is in the cart already"
    assert rejected.value.run_id == handle.id and rejected.value.name == "add_item"
    assert handle.update("add_item", "pear") == {"count": 2}
    assert handle.get(timeout=5) == ["apple", "pear"]
    assert [s.name for s in handle.steps()] == [WAIT, REPLY, WAIT, REJECT, WAIT, REPLY]
    assert [s.status for s in handle.steps()] == ["ok"] * 6
    assert statuses(durable, handle.id) == [
        ("add_item", "answered"),
        ("add_item", "rejected"),
        ("add_item", "answered"),
    ]
    # The run replayed from the start at each wake-up: every request was answered once
    # (the recorded answers came back, the body's code saw each payload as it replayed).
    assert asked.count("pear") == 1


def test_a_validator_refuses_before_anything_is_recorded(durable):
    asked: list[Any] = []
    cart = make_cart(durable, asked)
    seen: list[Any] = []

    @cart.validator("add_item")
    def named(sku: Any) -> None:
        seen.append(sku)
        if not isinstance(sku, str) or not sku:
            raise ValueError("a sku is a non-empty string")

    handle = cart.delay(1)
    with pytest.raises(UpdateRejected) as refused:
        handle.update("add_item", "")
    assert refused.value.reason == "a sku is a non-empty string"
    assert [(s.name, s.status) for s in handle.steps()] == [(WAIT, "waiting")]  # no trace
    assert asked == [] and handle.status() is WorkflowStatus.WAITING
    assert handle.update("add_item", "fig") == {"count": 1}
    assert handle.get(timeout=5) == ["fig"]
    assert seen == ["", "fig"]  # a replay takes the recorded request: not validated again
    assert statuses(durable, handle.id) == [("add_item", "refused"), ("add_item", "answered")]
    assert [s.name for s in handle.steps()] == [WAIT, REPLY]


def test_a_validator_is_registered_by_a_name_and_decorates_a_function(durable):
    cart = make_cart(durable, [])
    with pytest.raises(InvalidArgument, match="validator"):
        cart.validator("")
    with pytest.raises(TypeError, match="decorates a function"):
        cart.validator("add_item")(42)


def test_a_run_that_ends_without_answering_leaves_its_caller_not_handled(durable):
    @durable.workflow(max_attempts=1)
    def forgetful() -> str:
        req = cd.wait_for_update("ask")
        return f"took {req.payload}"

    handle = forgetful.delay()
    with pytest.raises(UpdateNotHandled) as unanswered:
        handle.update("ask", "q")
    assert unanswered.value.status == "SUCCEEDED"
    assert handle.get(timeout=5) == "took q"
    assert statuses(durable, handle.id) == [("ask", "received")]
    assert durable.runtime.store.updates.run_updates(handle.id)[0].idx == 0
    with pytest.raises(WorkflowAlreadyCompleted):
        handle.update("ask", "again")  # a new request to a finished run is refused


def test_a_timeout_leaves_the_request_and_the_same_key_finds_it_again(durable):
    @durable.workflow(max_attempts=1)
    def busy() -> Any:
        cd.wait_for_signal("go")
        req = cd.wait_for_update("ask")
        req.reply(f"answer to {req.payload}")
        return "done"

    handle = busy.delay()
    with pytest.raises(CeleryTimeoutError, match="the request stays"):
        handle.update("ask", "q1", timeout=0.05, idempotency_key="ask-1")
    assert statuses(durable, handle.id) == [("ask", "pending")]
    handle.signal("go")  # the body now takes the request it was sent while busy
    assert handle.get(timeout=5) == "done"
    # The retry finds the first request and its answer: nothing new is stored.
    assert handle.update("ask", "q1", idempotency_key="ask-1") == "answer to q1"
    assert statuses(durable, handle.id) == [("ask", "answered")]


def test_an_unanswered_request_of_a_cancelled_run_is_not_handled(durable):
    @durable.workflow(max_attempts=1)
    def idle() -> None:
        cd.wait_for_signal("never")

    handle = idle.delay()
    with pytest.raises(CeleryTimeoutError):
        handle.update("ask", None, timeout=0, idempotency_key="k")
    handle.cancel("not needed")
    with pytest.raises(UpdateNotHandled) as unanswered:
        handle.update("ask", None, timeout=5, idempotency_key="k")
    assert unanswered.value.status == "CANCELLED"
    assert len(statuses(durable, handle.id)) == 1


def test_bad_requests_are_refused_by_name(durable):
    cart = make_cart(durable, [])
    handle = cart.delay(1)
    with pytest.raises(WorkflowNotFound):
        durable.get_handle("no-such-run").update("add_item", "x", timeout=1)
    with pytest.raises(InvalidArgument, match="update\\(name\\)"):
        handle.update("", "x")
    with pytest.raises(InvalidArgument, match="idempotency_key"):
        handle.update("add_item", "x", idempotency_key="k" * 300)
    with pytest.raises(cd.NotSerialisable, match="the payload of update 'add_item'"):
        handle.update("add_item", object())
    with pytest.raises(InvalidArgument, match="update\\(timeout\\)"):
        handle.update("add_item", "x", timeout=-1)
    assert statuses(durable, handle.id) == []


def test_a_wait_for_an_update_times_out_to_its_default_and_replays_it(durable):
    @durable.workflow(max_attempts=1)
    def patient() -> Any:
        first = cd.wait_for_update("ask", timeout=0.05, default="nobody asked")
        cd.sleep(0.05)  # a replay passes the timed-out wait again
        return first

    handle = patient.delay()

    def done() -> bool:
        durable.runtime.sweeper.sweep_once()
        return handle.status() is WorkflowStatus.SUCCEEDED

    wait_until(done, 10, message="the wait to time out")
    assert handle.get(timeout=5) == "nobody asked"
    assert [(s.name, s.output) for s in handle.steps()][0] == ("celery_durable.update:ask", None)


def test_an_async_body_awaits_the_request_and_an_asyncio_caller_awaits_the_answer(durable):
    @durable.workflow(max_attempts=1)
    async def doubler() -> int:
        req = await cd.wait_for_update("double")
        req.reply(2 * req.payload)
        return int(req.payload)

    handle = doubler.delay()
    assert handle.status() is WorkflowStatus.WAITING
    assert run_apart(handle.aupdate("double", 21, timeout=10)) == 42
    assert handle.get(timeout=5) == 21


def test_wait_for_update_and_answers_belong_to_the_body(durable):
    with pytest.raises(RuntimeError, match="inside a workflow"):
        cd.wait_for_update("x")

    @durable.workflow(max_attempts=1)
    def twice() -> None:
        req = cd.wait_for_update("ask")
        req.reply(1)
        req.reply(2)

    handle = twice.delay()
    assert handle.update("ask") == 1
    with pytest.raises(cd.WorkflowFailed, match="answered already"):
        handle.get(timeout=5)
