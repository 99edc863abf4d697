"""Sagas, query(wait=) and continue_as_new on the embedded default (SQLite, eager)."""

from __future__ import annotations

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError

import celery_durable as cd
from celery_durable import InvalidArgument, PermanentError, WorkflowFailed, WorkflowStatus


def cancel_this_run(durable) -> None:  # type: ignore[no-untyped-def]
    """From a step: cancel the run it is a step of (RUNNING: it stops at a boundary)."""
    ctx = cd.WorkflowContext.current()
    assert ctx is not None
    durable.get_handle(ctx.run_id).cancel("changed my mind")


def _saga(durable, log: list[str], refund_failures: int = 0):  # type: ignore[no-untyped-def]
    def release(order: int, result: str) -> None:
        log.append(f"release {order} {result}")

    @durable.step(max_attempts=2)
    def refund(order: int, amount: int, result: str) -> str:
        log.append(f"refund {order} {amount} {result}")
        if log.count(f"refund {order} {amount} {result}") <= refund_failures:
            raise ConnectionError("provider down")
        return "refunded"

    @durable.step(compensate=release)
    def reserve(order: int) -> str:
        log.append("reserve")
        return f"hold-{order}"

    @durable.step(compensate=refund)
    def charge(order: int, amount: int) -> str:
        log.append("charge")
        return f"receipt-{order}"

    @durable.step
    def ship(order: int, mode: str) -> None:
        log.append("ship")
        if mode == "fail":
            raise PermanentError("no courier")

    @durable.workflow(max_attempts=3, retry_backoff=0)
    def checkout(order: int, mode: str) -> str:
        reserve(order)
        receipt = charge(order, 100)
        cd.set_state(receipt, key="receipt")
        if mode == "explicit":
            ran = cd.compensate()
            return ",".join(f"{c.step.rsplit('.', 1)[-1]}:{c.status}" for c in ran)
        if mode == "wait":
            cd.wait_for_signal("ship")
        ship(order, mode)
        return receipt

    return checkout


def test_permanent_failure_compensates_in_reverse_order(durable):
    log: list[str] = []
    handle = _saga(durable, log).delay(7, "fail")
    with pytest.raises(WorkflowFailed, match="no courier"):
        handle.get(timeout=5)
    assert log == ["reserve", "charge", "ship", "refund 7 100 receipt-7", "release 7 hold-7"]
    assert [(c.step.rsplit(".", 1)[-1], c.index, c.status) for c in handle.compensations()] == [
        ("charge", 1, "ok"),
        ("reserve", 0, "ok"),
    ]
    assert handle.record().compensation == "compensated"


def test_a_failing_compensation_is_retried_then_recorded_and_the_rest_still_run(durable):
    log: list[str] = []
    handle = _saga(durable, log, refund_failures=5).delay(8, "fail")
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=5)
    assert log.count("refund 8 100 receipt-8") == 2  # refund's own max_attempts
    assert log[-1] == "release 8 hold-8"
    assert "no courier" in failed.value.error_message
    assert "1 compensation(s) failed" in failed.value.error_message
    assert [c.status for c in handle.compensations()] == ["error", "ok"]
    assert handle.record().compensation == "compensation failed"
    assert handle.status() is WorkflowStatus.FAILED


def test_cancel_while_waiting_rolls_back(durable):
    log: list[str] = []
    handle = _saga(durable, log).delay(9, "wait")
    assert handle.status() is WorkflowStatus.WAITING
    assert handle.record().compensable
    handle.cancel("customer left")  # publishes it to roll back (eager: runs it at once)
    assert handle.status() is WorkflowStatus.CANCELLED
    assert log[-2:] == ["refund 9 100 receipt-9", "release 9 hold-9"]
    assert handle.record().compensation == "compensated"


def test_explicit_compensate_then_the_body_goes_on(durable):
    log: list[str] = []
    handle = _saga(durable, log).delay(10, "explicit")
    assert handle.get(timeout=5) == "charge:ok,reserve:ok"
    assert log == ["reserve", "charge", "refund 10 100 receipt-10", "release 10 hold-10"]
    assert handle.record().compensation is None  # the run succeeded


def test_query_wait_returns_a_value_set_before_or_times_out(durable):
    log: list[str] = []
    handle = _saga(durable, log).delay(11, "wait")
    assert handle.query("receipt", wait=1) == "receipt-11"
    with pytest.raises(CeleryTimeoutError, match="did not set 'missing'"):
        handle.query("missing", wait=0.3)
    with pytest.raises(InvalidArgument, match=r"query\(wait\)"):
        handle.query("receipt", wait=-1)
    handle.cancel()
    with pytest.raises(cd.WorkflowCancelled):
        handle.query("missing", wait=5)


def test_continue_as_new_starts_a_fresh_generation(durable):
    seen: list[int] = []

    @durable.step
    def read(n: int) -> int:
        seen.append(n)
        return n + 1

    @durable.workflow
    def loop(n: int = 0) -> int:
        nxt = read(n)
        got = cd.wait_for_signal("tick")
        if nxt < 3:
            cd.continue_as_new(nxt + int(got or 0) * 0)
        return nxt

    handle = loop.delay()
    for n in range(3):
        handle.signal("tick", n)
    assert handle.get(timeout=5) == 3
    assert seen == [0, 1, 2]
    record = handle.record()
    assert record.generation == 2 and record.continued_from == f"{handle.id}@1"
    assert len(handle.steps()) == 2  # this generation's history only
    archived = durable.get_handle(f"{handle.id}@0")
    assert archived.status() is WorkflowStatus.SUCCEEDED
    assert archived.record().continued_as == handle.id
    assert [s.name.rsplit(".", 1)[-1] for s in archived.steps()][0] == "read"

    @durable.workflow
    def bad() -> None:
        cd.continue_as_new(object())

    with pytest.raises(WorkflowFailed, match=r"NotSerialisable.*'#0' of continue_as_new"):
        bad.delay().get(timeout=5)


def test_cancel_while_running_rolls_back_at_the_next_step(durable):
    log: list[str] = []

    def undo(n: int, result: int) -> None:
        log.append(f"undo {n} {result}")

    @durable.step(compensate=undo)
    def take(n: int) -> int:
        return n * 10

    @durable.step
    def cancel_myself() -> None:
        cancel_this_run(durable)

    @durable.step
    def never() -> None:
        log.append("never")

    @durable.workflow
    def flow() -> None:
        take(1)
        take(2)
        cancel_myself()
        never()

    handle = flow.delay()
    assert handle.status() is WorkflowStatus.CANCELLED
    assert log == ["undo 2 20", "undo 1 10"]
    assert handle.record().compensation == "compensated"


def test_deferred_steps_are_written_before_the_rollback_and_compensated(durable):
    log: list[str] = []

    def undo(n: int, result: int) -> None:
        log.append(f"undo {n}")

    @durable.step(compensate=undo, commit="deferred")
    def take(n: int) -> int:
        return n

    @durable.step
    def fail() -> None:
        raise PermanentError("nope")

    @durable.workflow
    def flow() -> None:
        take(1)
        take(2)
        fail()

    handle = flow.delay()
    with pytest.raises(WorkflowFailed, match="nope"):
        handle.get(timeout=5)
    assert log == ["undo 2", "undo 1"]
    names = [s.name.rsplit(".", 1)[-1] for s in handle.steps()]
    assert names[:3] == ["take", "take", "fail"]  # the deferred records were written
    assert handle.record().compensation == "compensated"


def test_a_step_that_finishes_after_the_cancel_is_recorded_and_compensated(durable):
    """Bug: the step running when its run was cancelled finished, but its record (and the
    deferred records it carried) were refused: neither was history nor compensated."""
    log: list[str] = []

    def undo(n: int, result: int) -> None:
        log.append(f"undo {n} {result}")

    @durable.step(compensate=undo, commit="deferred")
    def take(n: int) -> int:
        return n * 10

    @durable.step(compensate=undo)
    def charge_while_cancelled(n: int) -> int:
        cancel_this_run(durable)
        log.append("charged")  # the side effect happens after the cancel
        return n * 10

    @durable.workflow
    def flow() -> None:
        take(1)
        charge_while_cancelled(2)
        take(3)  # past the boundary where the cancel takes effect: never runs

    handle = flow.delay()
    assert handle.status() is WorkflowStatus.CANCELLED
    assert log == ["charged", "undo 2 20", "undo 1 10"]
    steps = handle.steps()
    assert [(s.idx, s.name.rsplit(".", 1)[-1], s.status) for s in steps[:3]] == [
        (0, "take", "ok"),
        (1, "charge_while_cancelled", "ok"),
        (2, "rollback", "ok"),
    ]
    assert [(c.index, c.status) for c in handle.compensations()] == [(1, "ok"), (0, "ok")]
    assert handle.record().compensable
    assert handle.record().compensation == "compensated"


def test_a_routed_step_is_compensated_and_a_map_s_items_are_not(durable):
    """A routed step's record holds its call as a fan-out's: the rollback undoes it with
    that call, and leaves a map (no one call to undo) alone instead of failing on it."""
    log: list[str] = []

    def undo(n: int, result: int) -> None:
        log.append(f"undo {n} {result}")

    @durable.step(compensate=undo, queue="remote")
    def remote(n: int) -> int:
        return n * 10

    @durable.step(compensate=undo)
    def each(n: int) -> int:
        return n

    @durable.step
    def fail() -> None:
        raise PermanentError("nope")

    @durable.workflow(max_attempts=1)
    def flow() -> None:
        remote(1)
        cd.map(each, [7, 8])
        fail()

    handle = flow.delay()
    with pytest.raises(WorkflowFailed, match="nope"):
        handle.get(timeout=5)
    assert log == ["undo 1 10"]
    assert [(c.index, c.status) for c in handle.compensations()] == [(0, "ok")]
    assert handle.record().compensation == "compensated"
