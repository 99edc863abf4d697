"""Fleet-wide limiters with real workers: two workers of ``-c 4`` share one limiter of 3
slots, a per-tenant limiter keeps one run per tenant and serves every tenant, a rate holds,
a waiter holds nothing (its cancel and its priority), and a backlog leaves the pool free."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from celery_durable import WorkflowCancelled, WorkflowStatus
from tests.support.services import BROKER_URL, queue_length, unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker


@pytest.fixture(scope="module")
def workers(limited_app: Any) -> Iterator[list[Worker]]:
    """Two workers of the limiters' app, -c 4 each."""
    started = [
        Worker(
            "tests.apps.limited", {}, queues=limited_app.QUEUE, name=unique("lim"), concurrency=4
        )
        for _ in range(2)
    ]
    try:
        yield [worker.wait_ready() for worker in started]
    finally:
        for worker in started:
            worker.kill()


def noted(rds: Any, key: str, what: str) -> list[str]:
    return list(rds.lrange(f"limited:{key}:{what}", 0, -1))


def all_succeed(handles: list[Any], timeout: float) -> None:
    for handle in handles:
        assert handle.get(timeout=timeout) is not None or handle.state == "SUCCESS"


def test_two_workers_never_run_more_steps_at_once_than_the_limiter_has_slots(
    limited_app, workers, rds, key
):
    handles = [limited_app.in_threes.delay(key, n) for n in range(30)]
    assert [h.get(timeout=120) for h in handles] == list(range(30))
    at_once = [int(n) for n in noted(rds, key, "at_once")]
    assert len(at_once) == 30 and max(at_once) <= 3
    assert max(at_once) == 3  # the limit was reached: eight pool processes wanted more


def test_a_per_tenant_limiter_runs_one_per_tenant_and_serves_every_tenant(
    limited_app, workers, rds, key
):
    tenants = ("acme", "globex", "initech")
    handles = [
        limited_app.tenant_import.delay(tenant, key, n) for n in range(10) for tenant in tenants
    ]
    for handle in handles:
        handle.get(timeout=120)
    for tenant in tenants:
        assert max(int(n) for n in noted(rds, f"{key}:{tenant}", "at_once")) == 1
    order = noted(rds, key, "order")
    first = max(order.index(f"{tenant}:0") for tenant in tenants)
    fifth = min(order.index(f"{tenant}:4") for tenant in tenants)
    assert first < fifth  # every tenant started before any tenant's fifth run


def test_a_rate_spreads_the_starts_fleet_wide(limited_app, workers, rds, key):
    handles = [limited_app.rate_run.delay(key, n) for n in range(100)]
    # The window opens once every run has been claimed once and the queue is empty: until
    # then the runs a hand-off wakes queue behind the first deliveries, and their steps start
    # late, in a burst, which a window opened at a start (a burst's first) would count whole.
    wait_until(
        lambda: (
            queue_length(BROKER_URL, limited_app.QUEUE) == 0
            and all(h.status() is not WorkflowStatus.PENDING for h in handles)
        ),
        120,
        message="every rate run claimed once and the queue empty",
    )
    since = time.time()
    for handle in handles:
        handle.get(timeout=120)
    started = sorted(float(t) for t in noted(rds, key, "started"))
    assert len(started) == 100
    assert started[-1] >= since + 5.0  # runs still waited for tokens when the window closed
    in_five_seconds = sum(1 for t in started if since <= t < since + 5.0)
    assert 45 <= in_five_seconds <= 55  # 10/s: about 50 (loosely; the benchmark measures it)


def test_a_waiter_holds_nothing_its_cancel_frees_nothing_and_priority_goes_first(
    limited_app, workers, rds, key
):
    rds.set(f"hold:{key}:holder", "1")
    holder = limited_app.one_at_a_time.delay(key, "holder")
    wait_until(lambda: noted(rds, key, "order") == ["holder"], 60, message="the holder")
    waiters = [limited_app.one_at_a_time.delay(key, label) for label in ("a", "b", "c")]
    for waiter in waiters:
        wait_until(lambda w=waiter: w.status() is WorkflowStatus.WAITING, 60)
        assert waiter.record().wait_limiter == "tests.one"
    urgent = limited_app.one_at_a_time.apply_async((key, "urgent"), priority=9)
    wait_until(lambda: urgent.status() is WorkflowStatus.WAITING, 60)
    waiters[1].cancel("not needed")
    assert waiters[1].status() is WorkflowStatus.CANCELLED
    assert noted(rds, key, "order") == ["holder"]  # the cancel handed nothing on
    # Waiting, they hold no worker: an unlimited workflow runs at once meanwhile.
    assert limited_app.free.delay(key).get(timeout=60) == f"free {key}"
    rds.delete(f"hold:{key}:holder")
    for handle in (holder, urgent, waiters[0], waiters[2]):
        handle.get(timeout=60)
    assert noted(rds, key, "order") == ["holder", "urgent", "a", "c"]


def test_a_run_limiter_starts_its_waiting_runs_by_priority_then_age(limited_app, workers, rds, key):
    """Bug: runs that waited for a run limiter's slot from their start were queued with
    priority 0 (on Postgres), so one started with priority=9 ran after the three before it."""
    rds.set(f"hold:{key}:holder", "1")
    holder = limited_app.solo.delay(key, "holder")
    wait_until(lambda: noted(rds, key, "order") == ["holder"], 60, message="the holder")
    waiters = [limited_app.solo.delay(key, label) for label in ("1", "2", "3")]
    urgent = limited_app.solo.apply_async((key, "4"), priority=9)
    for waiter in (*waiters, urgent):
        record = waiter.record()
        assert (record.status, record.wait_limiter) == (
            "PENDING",
            "workflow:tests.apps.limited.solo",
        )
    assert urgent.record().priority == 9
    rds.delete(f"hold:{key}:holder")
    for handle in (holder, urgent, *waiters):
        handle.get(timeout=60)
    assert noted(rds, key, "order") == ["holder", "4", "1", "2", "3"]


def test_a_backlog_on_a_limiter_keeps_the_queue_empty_and_the_pool_free(
    limited_app, workers, rds, key
):
    # Both slots held while the backlog is made: it can't drain faster than it is started.
    rds.set(f"hold:{key}:pair", "1")
    holders = [limited_app.pair.delay(key, n) for n in (-1, -2)]
    wait_until(lambda: len(noted(rds, key, "holding")) == 2, 60, message="both slots held")
    backlog = [limited_app.pair.delay(key, n) for n in range(1000)]
    waiting = sum(1 for h in backlog[-50:] if h.record().wait_limiter is not None)
    assert waiting == 50  # each waits with no message
    assert queue_length(BROKER_URL, limited_app.QUEUE) <= 10
    assert limited_app.free.delay(key).get(timeout=60) == f"free {key}"  # a pool slot is free
    rds.delete(f"hold:{key}:pair")
    wait_until(lambda: int(rds.get(f"limited:{key}:done") or 0) == 1002, 300, 0.2, "the backlog")
    assert {h.status() for h in [*holders, *backlog]} == {WorkflowStatus.SUCCEEDED}


def test_a_slot_is_free_again_after_its_holder_s_worker_is_sigkilled(
    limited_app, start_worker, rds, key
):
    queue = unique("lk-")
    doomed = start_worker(name="lim", app="tests.apps.limited", queues=queue)
    rds.set(f"hold:{key}:holder", "1")
    holder = limited_app.one_at_a_time.apply_async((key, "holder"), queue=queue)
    wait_until(lambda: noted(rds, key, "order") == ["holder"], 60, message="the holder")
    waiter = limited_app.one_at_a_time.apply_async((key, "waiter"), queue=queue)
    wait_until(lambda: waiter.status() is WorkflowStatus.WAITING, 60)
    doomed.kill()  # SIGKILL of the whole worker, the slot's holder mid-step
    rds.delete(f"hold:{key}:holder")
    start_worker(name="lim", app="tests.apps.limited", queues=queue)
    started = time.monotonic()
    assert waiter.get(timeout=60) == "waiter" and holder.get(timeout=60) == "holder"
    assert time.monotonic() - started < 45  # after the lease (3 s here), not never


def test_a_run_s_steps_in_a_row_behind_one_limiter_take_one_slot_between_them(
    limited_app, start_worker, rds, key
):
    """The record of each step keeps the slot for the next, once the worker's process has
    seen the workflow run: every step of a later run holds the same slot row (takes of
    their own would each start from a random row of the key's)."""
    queue = unique("lk-")
    start_worker(name="lim", app="tests.apps.limited", queues=queue, concurrency=1)
    runs = [limited_app.charges.apply_async((key,), queue=queue) for _ in range(3)]
    assert [run.get(timeout=60) for run in runs] == [6, 6, 6]
    held: dict[str, set[str]] = {}
    for note in noted(rds, key, "slots"):
        run_id, slot = note.split(":")
        held.setdefault(run_id, set()).add(slot)
    later = [held[run.id] for run in runs[1:]]  # the first run taught the process
    assert [len(slots) for slots in later] == [1, 1], held
    assert all(h.status() is WorkflowStatus.SUCCEEDED for h in runs)
    # The slot kept for a step the body never reaches (it failed; its retry waits two
    # minutes) is given back: nothing holds a slot of the limiter meanwhile.
    taught = [limited_app.charge_twice.apply_async((key, False), queue=queue) for _ in range(2)]
    assert [run.get(timeout=60) for run in taught] == [1, 1]
    failing = limited_app.charge_twice.apply_async((key, True), queue=queue)
    store, plenty = limited_app.durable.runtime.store, limited_app.plenty.limit
    wait_until(
        lambda: (
            store.get_run(failing.id).attempts == 1 and failing.status() is WorkflowStatus.PENDING
        ),
        timeout=60,
        message="the failed run's retry is scheduled",
    )
    usage = {u.limiter: u.in_use for u in store.limiters.limiter_usage({plenty.name: plenty})}
    assert usage.get(plenty.name, 0) == 0, usage
    failing.cancel()


def test_twenty_concurrent_starts_with_one_dedup_key_make_one_run(limited_app, workers, rds, key):
    from concurrent.futures import ThreadPoolExecutor

    def start(n: int) -> str:
        return str(limited_app.synced.apply_async((key, n), dedup_key=key, debounce=1).id)

    with ThreadPoolExecutor(20) as pool:
        ids = set(pool.map(start, range(20)))
    assert len(ids) == 1
    [run_id] = ids
    done = limited_app.durable.get_handle(run_id).get(timeout=60)
    assert noted(rds, key, "synced") == [str(done)]  # one run, with one call's arguments


def test_ten_debounced_calls_a_tenth_of_a_second_apart_make_one_run_with_the_last(
    limited_app, workers, rds, key
):
    handles = []
    for n in range(10):
        handles.append(limited_app.synced.apply_async((key, n), dedup_key=key, debounce=1))
        time.sleep(0.1)  # the calls' pace, as a client sends them (not a wait on a result)
    assert len({h.id for h in handles}) == 1
    assert handles[0].get(timeout=60) == 9
    assert noted(rds, key, "synced") == ["9"]


def test_a_waiting_run_is_cancelled_at_its_deadline_and_its_compensations_run(
    limited_app, workers, rds, key
):
    handle = limited_app.timed.delay(key)
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 60, message="the wait")
    with pytest.raises(WorkflowCancelled, match="deadline exceeded"):
        handle.get(timeout=60)
    run = handle.record()
    assert run.deadline_at is not None and run.finished_at is not None
    assert run.finished_at - run.deadline_at < 2.0  # within a poll or so (0.2 s here)
    wait_until(lambda: noted(rds, key, "compensated") == [f"reserved {key}"], 30)


def test_a_step_that_terminates_on_timeout_is_stopped_at_the_deadline(
    limited_app, workers, rds, key
):
    rds.set(f"hold:{key}:long", "1")  # the step would block for a minute
    try:
        handle = limited_app.timed_call.delay(key)
        with pytest.raises(WorkflowCancelled, match="deadline exceeded"):
            handle.get(timeout=45)
        run = handle.record()
        assert noted(rds, key, "order") == ["long"]  # it was running when stopped
        assert run.finished_at is not None and run.finished_at - run.deadline_at < 20
    finally:
        rds.delete(f"hold:{key}:long")


def test_limiters_hold_for_async_bodies_and_steps(limited_app, workers, rds, key):
    """A step limiter of 3 on an async step, and a run limiter of 1 on an async body."""
    handles = [limited_app.in_threes_async.delay(key, n) for n in range(12)]
    assert [h.get(timeout=120) for h in handles] == list(range(12))
    at_once = [int(n) for n in noted(rds, key, "at_once")]
    assert len(at_once) == 12 and max(at_once) <= 3

    solo_key = f"{key}-solo"
    runs = [limited_app.solo_async.delay(solo_key, str(n)) for n in range(4)]
    assert [r.get(timeout=120) for r in runs] == ["0", "1", "2", "3"]
    assert max(int(n) for n in noted(rds, solo_key, "at_once")) == 1
