"""The updates area on both databases: concurrent callers with one idempotency key store
one request; a request stored while the body suspends is seen by one side or the other;
only the run's owner takes, answers or refuses a request; the sweeper wakes a run whose
wake-up was lost; gc deletes a run's requests with it."""

from __future__ import annotations

import threading
import time

from celery_durable.store import Outcome, StepRecord
from celery_durable.store.engine_names import UPDATE_STEP_PREFIX
from tests.support.builders import claimed, new_run

WAIT = UPDATE_STEP_PREFIX + "ask"


def waiting_step(idx: int = 0) -> StepRecord:
    return StepRecord(idx, WAIT, "waiting", "[]", '{"deadline": null}', None)


def taken_step(update_id: int, idx: int = 0) -> StepRecord:
    return StepRecord(idx, WAIT, "ok", "[]", f'{{"id": {update_id}, "payload": 1}}', None, 0.0)


def test_concurrent_callers_with_one_key_store_one_request(store):
    store.insert_run(new_run("r1"))
    ids: list[int] = []
    start = threading.Barrier(8)

    def send() -> None:
        start.wait()
        stored = store.updates.insert_update("r1", "ask", "1", "same-key")
        ids.append(stored.id)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(ids) == 8 and len(set(ids)) == 1
    assert [u.status for u in store.updates.run_updates("r1")] == ["pending"]
    assert store.updates.insert_update("r1", "ask", "2", None).outcome is Outcome.STORED
    assert store.updates.insert_update("nope", "ask", "1", None).outcome is Outcome.NOT_FOUND


def test_a_request_stored_before_the_suspension_stops_it(store):
    fence = claimed(store, "r2")
    stored = store.updates.insert_update("r2", "ask", "1", None)
    suspended = store.updates.suspend_for_update("r2", fence, waiting_step(), "ask", WAIT, None)
    assert suspended is Outcome.SIGNALLED
    assert store.get_run("r2").status == "RUNNING"
    assert store.updates.oldest_update("r2", "ask") == (stored.id, "1")
    other = store.updates.suspend_for_update("r2", fence, waiting_step(), "other", "x", None)
    assert other is Outcome.SUSPENDED
    assert store.get_run("r2").status == "WAITING"


def test_only_the_owner_takes_and_answers_a_request(store):
    fence = claimed(store, "r3")
    stored = store.updates.insert_update("r3", "ask", "1", None)
    stale = store.updates.receive_update("r3", fence + 1, stored.id, taken_step(stored.id))
    assert stale is Outcome.LEASE_LOST
    taken = store.updates.receive_update("r3", fence, stored.id, taken_step(stored.id))
    assert taken is Outcome.RECORDED
    again = store.updates.receive_update("r3", fence, stored.id, taken_step(stored.id))
    assert again is Outcome.NO_SIGNAL  # received already
    reply = StepRecord(1, "celery_durable.update_reply:ask", "ok", '{"update": 1}', "7", None)
    assert (
        store.updates.answer_update("r3", fence + 1, stored.id, "answered", "7", reply)
        is Outcome.LEASE_LOST
    )
    assert store.updates.read_update("r3", stored.id).status == "received"
    assert (
        store.updates.answer_update("r3", fence, stored.id, "answered", "7", reply)
        is Outcome.RECORDED
    )
    state = store.updates.read_update("r3", stored.id)
    assert (state.run_status, state.status, state.answer) == ("RUNNING", "answered", "7")
    assert sorted(store.load_steps("r3")) == [0, 1]


def test_a_refusal_writes_no_step(store):
    fence = claimed(store, "r4")
    stored = store.updates.insert_update("r4", "ask", "1", None)
    assert store.updates.refuse_update("r4", fence, stored.id, "no") is Outcome.RECORDED
    assert store.updates.read_update("r4", stored.id).status == "refused"
    assert store.load_steps("r4") == {}
    assert store.updates.oldest_update("r4", "ask") is None


def test_the_sweeper_wakes_a_run_whose_wake_up_was_lost(store):
    fence = claimed(store, "r5")
    store.updates.suspend_for_update("r5", fence, waiting_step(), "ask", WAIT, None)
    store.updates.insert_update("r5", "other", "1", None)  # not what it waits for
    assert store.updates.wake_updated_runs(-60.0, ["wf"]) == []
    store.updates.insert_update("r5", "ask", "1", None)
    assert store.updates.wake_updated_runs(60.0, ["wf"]) == []  # its own wake-up comes first
    assert store.updates.wake_updated_runs(-60.0, ["another"]) == []  # not this worker's
    [woken] = store.updates.wake_updated_runs(-60.0, ["wf"])
    assert woken.id == "r5" and store.get_run("r5").status == "PENDING"
    # The caller's own wake-up names what the run waits for, as a signal's does.
    fence = store.claim_run("r5", "me", lease=30).fence
    store.updates.suspend_for_update(
        "r5", fence, waiting_step(1), "later", UPDATE_STEP_PREFIX + "later", None
    )
    assert store.wake_run("r5", UPDATE_STEP_PREFIX + "ask", 60.0) is None
    assert store.wake_run("r5", UPDATE_STEP_PREFIX + "later", 60.0).id == "r5"


def test_gc_deletes_the_requests_with_their_run(store):
    fence = claimed(store, "r6")
    store.updates.insert_update("r6", "ask", "1", None)
    assert store.settle_run("r6", fence, "SUCCEEDED", result="1") == "SUCCEEDED"
    collected = store.gc_runs("SUCCEEDED", time.time() + 3600, batch=10)
    assert collected.runs == {"SUCCEEDED": 1}
    assert store.updates.run_updates("r6") == []
