"""Limiters on the embedded default (SQLite, eager mode): a limited step or workflow waits
for a slot holding nothing, and the slot's release hands it to the next waiter; bad
declarations are refused naming what is wrong."""

from __future__ import annotations

import pytest

from celery_durable import InvalidArgument, WorkflowStatus
from celery_durable.limiters.limiter import parse_rate
from celery_durable.limiters.run_slots import CATCH_UP_POLLS
from tests.support.waiting import wait_until


def test_bad_declarations_are_refused_naming_them(durable):
    with pytest.raises(InvalidArgument, match="limiter 'a': concurrency must be an integer >= 1"):
        durable.limiter("a", concurrency=0)
    with pytest.raises(InvalidArgument, match="limiter 'b': rate must be \"N/s\""):
        durable.limiter("b", rate="fast")
    with pytest.raises(InvalidArgument, match="give concurrency, rate, or both"):
        durable.limiter("c")
    with pytest.raises(InvalidArgument, match="no limiter named 'nope'"):
        durable.step(limiter="nope")(lambda: None)
    with pytest.raises(InvalidArgument, match="give limiter or concurrency, not both"):
        durable.workflow(limiter=durable.limiter("d", concurrency=1), concurrency=2)(lambda: 1)
    assert parse_rate("20/s", "x") == 20.0 and parse_rate("30/m", "x") == 0.5

    keyed = durable.limiter("tenants", concurrency=1, key=lambda tenant: tenant.upper())

    @durable.step(limiter=keyed)
    def work(tenant: object) -> None: ...

    @durable.workflow(max_attempts=1)
    def job(tenant: object) -> None:
        work(tenant)

    failed = job.delay(7)  # the key function raises on an int
    assert failed.status() is WorkflowStatus.FAILED
    assert "the key function of limiter 'tenants' raised" in (failed.traceback or "")


def test_a_concurrency_key_that_fails_is_named_as_the_user_wrote_it(durable):
    @durable.workflow(concurrency=1, concurrency_key=lambda order: order)
    def by_number(order: object) -> None: ...

    @durable.workflow(concurrency=1, concurrency_key=lambda order: order.region)
    def by_region(order: object) -> None: ...

    with pytest.raises(InvalidArgument) as returned:
        by_number.delay(7)
    said = str(returned.value)
    assert f"workflow {by_number.name}: concurrency_key returned int 7, not a string" in said
    assert "key function of limiter" not in said
    with pytest.raises(InvalidArgument) as raised:
        by_region.delay(7)
    assert f"workflow {by_region.name}: concurrency_key raised AttributeError" in str(raised.value)


def test_a_limited_step_waits_for_the_slot_and_gets_it_when_released(durable):
    one = durable.limiter("one", concurrency=1)
    order: list[str] = []

    @durable.step(limiter=one)
    def guarded(who: str) -> str:
        order.append(f"{who} in")
        if who == "first":
            # While it holds the only slot, a second run reaches the step: it waits.
            second = pipeline.delay("second")
            assert second.status() is WorkflowStatus.WAITING
            assert second.record().wait_limiter == "one"
        order.append(f"{who} out")
        return who

    @durable.workflow
    def pipeline(who: str) -> str:
        return guarded(who)

    first = pipeline.delay("first")
    assert first.get(timeout=5) == "first"
    # The release handed the slot on and published the waiter (eager: it ran at once).
    assert order == ["first in", "first out", "second in", "second out"]
    limits = {name: each.limit for name, each in durable.runtime.limiters.items()}
    [usage] = durable.runtime.store.limiters.limiter_usage(limits)
    assert (usage.limiter, usage.in_use, usage.waiting) == ("one", 0, 0)


def test_a_limited_workflow_waits_pending_with_no_message_and_priority_orders_waiters(durable):
    order: list[str] = []

    @durable.workflow(concurrency=1)
    def exclusive(who: str, children: list[tuple[str, int]]) -> str:
        order.append(who)
        for child, priority in children:
            waiting = exclusive.apply_async((child, []), priority=priority)
            run = waiting.record()
            assert (run.status, run.wait_limiter) == ("PENDING", "workflow:" + exclusive.name)
        return who

    done = exclusive.delay("first", [("low", 0), ("high", 9), ("low2", 0)])
    assert done.get(timeout=5) == "first"
    # Hands the freed slot on; each run's release hands the next.
    durable.runtime.sweeper.sweep_once()
    assert order == ["first", "high", "low", "low2"]


def test_a_rated_limiter_hands_its_waiters_the_tokens_of_the_time_since_the_last_hand_off(
    durable,
):
    """The bucket caps what an idle limiter saves up, not what its waiters are owed: a
    sweep three polls after the waiters parked hands out three polls' worth of tokens, more
    than the bucket's quarter second. A sweep that comes late gives no more than that: no
    burst of the tokens it missed."""
    rated = durable.limiter("rated", rate="20/s")
    started: list[int] = []

    @durable.step(limiter=rated)
    def stamp(n: int) -> int:
        started.append(n)
        return n

    @durable.workflow
    def one(n: int) -> int:
        return stamp(n)

    store = durable.runtime.store
    catch_up = CATCH_UP_POLLS * durable.runtime.config.poll_interval
    owed = catch_up * 20.0
    assert owed > rated.limit.capacity  # else this test tells nothing
    runs = [one.delay(n) for n in range(40)]  # a new bucket is empty: every run waits
    assert not started and {r.status() for r in runs} == {WorkflowStatus.WAITING}
    parked = store.now()
    wait_until(lambda: store.now() >= parked + catch_up, 5, message="three polls of tokens")

    def sweep() -> tuple[int, float]:
        """The runs a sweep starts, and the tokens minted while it ran (each run it
        starts runs at once, in eager mode, and its release hands on what came since)."""
        before, began = len(started), store.now()
        durable.runtime.sweeper.sweep_once()
        return len(started) - before, (store.now() - began) * 20.0

    first, meanwhile = sweep()
    assert 0.75 * owed <= first <= owed + meanwhile + 1, (first, owed, meanwhile)
    swept = store.now()
    wait_until(lambda: store.now() >= swept + 3 * catch_up, 10, message="a late sweep")
    late, meanwhile = sweep()
    # Three polls' worth at most, not the nine it missed (and what came while it ran).
    assert late <= owed + meanwhile + 1, (late, owed, meanwhile)
