"""An update during a worker kill: the body took the request and was pricing the cart
when its worker was SIGKILLed; another worker recovers the run, replays the recorded
request and answers it once; the caller, waiting all along, gets that answer."""

from __future__ import annotations

import threading
from typing import Any

import celery_durable as cd
from tests.support.services import unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker

WAIT = "celery_durable.update:add_item"
REPLY = "celery_durable.update_reply:add_item"


def test_an_update_taken_before_a_sigkill_is_answered_once_after_recovery(updates_app, key, rds):
    workers: list[Worker] = []

    def start() -> Worker:
        worker = Worker("tests.apps.updates", {}, queues=updates_app.QUEUE, name=unique("upk"))
        workers.append(worker)
        return worker.wait_ready()

    try:
        first = start()
        rds.set(f"block:{key}:priced", "1")
        handle = updates_app.cart.delay(key, 1)
        wait_until(
            lambda: handle.status() is cd.WorkflowStatus.WAITING, 30, message="the run to wait"
        )
        answers: list[Any] = []
        caller = threading.Thread(
            target=lambda: answers.append(handle.update("add_item", "plum", timeout=120)),
            daemon=True,
        )
        caller.start()
        wait_until(lambda: rds.get(f"started:{key}:priced"), 30, message="the body to take it")
        store = updates_app.durable.runtime.store
        assert [u.status for u in store.updates.run_updates(handle.id)] == ["received"]
        first.kill()  # mid-step: the request is recorded, its answer is not
        rds.delete(f"block:{key}:priced")
        start()
        caller.join(120)
        assert answers == [{"count": 1, "total": 4}]
        assert handle.get(timeout=60) == {"items": ["plum"]}
        assert [u.status for u in store.updates.run_updates(handle.id)] == ["answered"]
        names = [s.name for s in handle.steps()]
        assert names == [WAIT, "tests.apps.updates.priced", REPLY]
        assert handle.record().recoveries == 1
        assert int(rds.get(f"updates:{key}:priced")) == 2  # the killed step ran again
    finally:
        for worker in workers:
            worker.kill()
