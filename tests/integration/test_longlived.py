"""Long-lived workflows on real workers, Redis/RabbitMQ and Postgres: a deploy under a
running run (patched), sagas (permanent failure, cancel, SIGKILL mid-rollback),
query(wait=) and continue_as_new with signals in flight."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError

from celery_durable import WorkflowFailed, WorkflowStatus
from tests.support.builders import new_run
from tests.support.cli import celery
from tests.support.services import effects
from tests.support.waiting import wait_until

APP = "tests.apps.longlived"


@pytest.fixture(scope="module")
def longlived(basic_app: object) -> Any:
    from tests.apps import longlived

    return longlived


def status_is(handle: Any, status: WorkflowStatus) -> bool:
    return bool(handle.status() is status)


def test_patched_deploy_between_two_attempts_of_one_run(longlived, start_worker, key, rds):
    v1 = start_worker(env={"TEST_CODE_VERSION": "v1"}, app=APP)
    old = longlived.deployed.delay(f"{key}-old")
    wait_until(lambda: status_is(old, WorkflowStatus.WAITING), 30, message="v1 run to wait")
    v1.kill()  # the deploy: v1 is gone, v2 takes over the run in flight
    start_worker(env={"TEST_CODE_VERSION": "v2"}, app=APP)
    new = longlived.deployed.delay(f"{key}-new")
    wait_until(lambda: status_is(new, WorkflowStatus.WAITING), 30, message="v2 run to wait")
    old.signal("go")
    new.signal("go")
    # The old run passed the patch point on v1: False, the old branch, no NonDeterminismError.
    assert old.get(timeout=30) == [10, 20, 40]
    assert new.get(timeout=30) == [10, 30, 40]
    assert effects(rds, f"{key}-old", "s2") == 1 and effects(rds, f"{key}-old", "s3") == 0
    assert effects(rds, f"{key}-new", "s3") == 1 and effects(rds, f"{key}-new", "s2") == 0
    assert new.steps()[1].name == "celery_durable.patch:extra-step"


def test_saga_compensates_after_a_permanent_failure(longlived, start_worker, key, rds):
    start_worker(app=APP)
    handle = longlived.saga.delay(key, "fail")
    with pytest.raises(WorkflowFailed, match="no courier"):
        handle.get(timeout=30)
    assert [(c.index, c.status) for c in handle.compensations()] == [(1, "ok"), (0, "ok")]
    assert handle.record().compensation == "compensated"
    assert effects(rds, key, "refund") == 1 and effects(rds, key, "release") == 1
    shown = celery("durable", "show", handle.id)
    assert shown.returncode == 0, shown.stderr
    assert "failed, compensated (rolled back)" in shown.stdout
    assert "celery_durable.compensate:tests.apps.longlived.charge" in shown.stdout


def test_saga_cancelled_while_waiting_rolls_back_and_query_waits(longlived, start_worker, key, rds):
    start_worker(app=APP)
    rds.set(f"block:{key}:charge", "1")
    handle = longlived.saga.delay(key, "wait")
    wait_until(lambda: rds.get(f"started:{key}:charge"), 30, message="charge to start")
    answer: dict[str, Any] = {}
    asking = threading.Event()

    def ask() -> None:
        asking.set()
        answer["receipt"] = handle.query("receipt", wait=30)

    thread = threading.Thread(target=ask)
    thread.start()
    asking.wait(10)
    rds.delete(f"block:{key}:charge")  # the key is set after the call
    thread.join(40)
    assert answer == {"receipt": "receipt-100"}
    wait_until(lambda: status_is(handle, WorkflowStatus.WAITING), 30, message="the wait")
    assert handle.query("receipt", wait=5) == "receipt-100"  # set before the call
    with pytest.raises(CeleryTimeoutError):
        handle.query("never", wait=0.5)
    handle.cancel("customer left")
    assert handle.wait(timeout=30) is WorkflowStatus.CANCELLED
    assert handle.record().compensation == "compensated"
    assert effects(rds, key, "refund") == 1 and effects(rds, key, "release") == 1


def test_a_step_that_finishes_after_the_cancel_is_recorded_and_compensated(
    longlived, start_worker, key, rds
):
    """Bug: ``charge`` ran to its end after the cancel (the payment was made), but its
    record was refused, so only ``reserve`` was in the history and compensated."""
    start_worker(app=APP)
    rds.set(f"block:{key}:charge", "1")
    handle = longlived.saga.delay(key, "ship")
    wait_until(lambda: rds.get(f"started:{key}:charge"), 30, message="charge to start")
    assert handle.cancel("customer left") is WorkflowStatus.RUNNING
    assert handle.record().cancel_requested
    rds.delete(f"block:{key}:charge")  # charge now finishes: its side effect happened
    assert handle.wait(timeout=30) is WorkflowStatus.CANCELLED
    steps = handle.steps()
    assert [(s.idx, s.name.rsplit(".", 1)[-1], s.status) for s in steps[:2]] == [
        (0, "reserve", "ok"),
        (1, "charge", "ok"),
    ]
    assert steps[1].output == '"receipt-100"'
    # The cancel took effect at the boundary after charge: nothing after it ran.
    assert [s.name for s in steps[2:]][0] == "celery_durable.rollback"
    assert [(c.index, c.status) for c in handle.compensations()] == [(1, "ok"), (0, "ok")]
    assert handle.record().compensation == "compensated"
    assert handle.record().cancel_reason == "customer left"
    assert effects(rds, key, "charge") == 1
    assert effects(rds, key, "refund") == 1 and effects(rds, key, "release") == 1


def test_sigkill_during_the_rollback_resumes_it(longlived, start_worker, key, rds):
    start_worker(app=APP)
    # Steps: reserve 0, charge 1, ship 2 (failed), the rollback marker 3, refund 4, release 5.
    rds.set(f"fault:{key}", "after_record_step:kill:4")
    handle = longlived.saga.apply_async((key, "fail"), run_id=key)
    with pytest.raises(WorkflowFailed, match="no courier"):
        handle.get(timeout=60)
    assert rds.get(f"fired:{key}:after_record_step") == "1"
    assert effects(rds, key, "refund") == 1  # recorded before the kill: not run again
    assert effects(rds, key, "release") == 1
    assert [c.status for c in handle.compensations()] == ["ok", "ok"]
    assert handle.record().recoveries == 1


def test_continue_as_new_carries_signals_across_the_boundary(longlived, start_worker, key):
    start_worker(app=APP)
    handle = longlived.looping.delay(key)
    for n in (1, 2, 3, 4, 0):  # sent at once: most arrive while a generation ends
        handle.signal("add", n)
    assert handle.get(timeout=60) == {"n": 4, "total": 10}
    record = handle.record()
    assert record.generation == 4 and record.continued_from == f"{handle.id}@3"
    assert handle.query("progress") == {"n": 4, "total": 10}
    assert len(handle.steps()) == 1  # this generation's wait only
    previous = longlived.durable.get_handle(f"{handle.id}@3")
    assert previous.status() is WorkflowStatus.SUCCEEDED
    assert previous.record().continued_as == handle.id


def test_set_state_wakes_a_listener_at_once_on_postgres(basic_app, key):
    """query(wait=) on Postgres is woken by the NOTIFY set_state sends, not a poll."""
    store = basic_app.durable.runtime.store
    assert store.insert_run(new_run(key))
    claim = store.claim_run(key, "test-owner", 30.0)
    assert claim is not None
    with store.listener() as listener:
        assert listener.conn is not None  # LISTEN, not polling
        assert store.waits.set_state(key, claim.fence, "receipt", '"r-1"')
        started = time.monotonic()
        listener.wait_for(key, 20.0)
        assert time.monotonic() - started < 10.0  # the NOTIFY, not the 20 s timeout
