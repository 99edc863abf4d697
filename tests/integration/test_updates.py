"""Updates against a real worker, the broker under test and Postgres: an update answered,
one refused by the validator (no step), one rejected by the body, one to a run that ends
first, and a caller that retries with its idempotency key (one request recorded)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError

import celery_durable as cd
from celery_durable import UpdateNotHandled, UpdateRejected, WorkflowAlreadyCompleted
from tests.support.event_loop import run_apart
from tests.support.services import unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker

WAIT = "celery_durable.update:add_item"
REPLY = "celery_durable.update_reply:add_item"
REJECT = "celery_durable.update_reject:add_item"


@pytest.fixture(scope="module")
def updates_worker(updates_app: Any) -> Iterator[Worker]:
    worker = Worker("tests.apps.updates", {}, queues=updates_app.QUEUE, name=unique("upd"))
    try:
        yield worker.wait_ready()
    finally:
        worker.kill()


def waiting(handle: cd.WorkflowHandle) -> bool:
    return handle.status() is cd.WorkflowStatus.WAITING


def requests(app: Any, run_id: str) -> list[tuple[str, str]]:
    return [(u.name, u.status) for u in app.durable.runtime.store.updates.run_updates(run_id)]


class Caller(threading.Thread):
    """``call()`` on a thread of its own: the test goes on while the caller waits."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.call()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc

    def outcome(self, timeout: float = 60) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "the caller is still waiting"
        if self.error is not None:
            raise self.error
        return self.value


def test_an_update_is_answered_refused_and_rejected(updates_app, updates_worker, key):
    handle = updates_app.cart.delay(key, 2)
    wait_until(lambda: waiting(handle), 30, message="the run to wait for an update")
    assert handle.record().owner is None  # no worker held while it waits
    assert handle.update("add_item", "apple", timeout=30) == {"count": 1, "total": 5}
    with pytest.raises(UpdateRejected) as refused:
        handle.update("add_item", "", timeout=30)
    assert refused.value.reason == "a sku is a non-empty string"
    with pytest.raises(UpdateRejected) as rejected:
        handle.update("add_item", "apple", timeout=30)
    assert rejected.value.reason == "apple is in the cart already"
    assert handle.update("add_item", "fig", timeout=30) == {"count": 2, "total": 8}
    assert handle.get(timeout=30) == {"items": ["apple", "fig"]}
    priced = "tests.apps.updates.priced"
    # The refused request left no step; the rejected one did (the body's answer).
    assert [s.name for s in handle.steps()] == [
        *(WAIT, priced, REPLY),
        *(WAIT, REJECT),
        *(WAIT, priced, REPLY),
    ]
    assert requests(updates_app, handle.id) == [
        ("add_item", "answered"),
        ("add_item", "refused"),
        ("add_item", "rejected"),
        ("add_item", "answered"),
    ]
    with pytest.raises(WorkflowAlreadyCompleted):
        handle.update("add_item", "late", timeout=5)


def test_an_update_to_a_run_that_ends_first_is_not_handled(updates_app, updates_worker, key, rds):
    rds.set(f"block:{key}:priced", "1")
    handle = updates_app.unanswered.delay(key)
    wait_until(lambda: waiting(handle), 30, message="the run to wait for an update")
    caller = Caller(lambda: handle.update("ask", "q", timeout=60))
    caller.start()
    wait_until(lambda: rds.get(f"started:{key}:priced"), 30, message="the body to take it")
    assert requests(updates_app, handle.id) == [("ask", "received")]
    rds.delete(f"block:{key}:priced")
    with pytest.raises(UpdateNotHandled) as unanswered:
        caller.outcome()
    assert unanswered.value.status == "SUCCEEDED"
    assert handle.get(timeout=30) == "ended"


def test_a_caller_that_retries_with_its_key_gets_the_one_answer(
    updates_app, updates_worker, key, rds
):
    rds.set(f"block:{key}:priced", "1")
    handle = updates_app.cart.delay(key, 1)
    wait_until(lambda: waiting(handle), 30, message="the run to wait for an update")
    with pytest.raises(CeleryTimeoutError, match="the request stays"):
        handle.update("add_item", "pear", timeout=0.5, idempotency_key="pear-1")
    wait_until(lambda: rds.get(f"started:{key}:priced"), 30, message="the body to take it")
    rds.delete(f"block:{key}:priced")
    retried = handle.update("add_item", "pear", timeout=30, idempotency_key="pear-1")
    assert retried == {"count": 1, "total": 4}
    assert handle.get(timeout=30) == {"items": ["pear"]}
    assert requests(updates_app, handle.id) == [("add_item", "answered")]
    assert [s.name for s in handle.steps()].count(REPLY) == 1
    assert int(rds.get(f"updates:{key}:priced")) == 1


def test_an_asyncio_caller_awaits_the_answer(updates_app, updates_worker, key):
    handle = updates_app.cart.delay(key, 2)
    wait_until(lambda: waiting(handle), 30, message="the run to wait for an update")

    async def two_requests() -> list[Any]:
        first = await handle.aupdate("add_item", "kiwi", timeout=30)
        with pytest.raises(UpdateRejected):
            await handle.aupdate("add_item", "kiwi", timeout=30)
        return [first, await handle.aupdate("add_item", "lime", timeout=30)]

    assert run_apart(two_requests()) == [{"count": 1, "total": 4}, {"count": 2, "total": 8}]
    assert handle.get(timeout=30) == {"items": ["kiwi", "lime"]}
