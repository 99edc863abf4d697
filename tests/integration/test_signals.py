"""Signals, timers, queries and cancellation against a real worker, Redis and Postgres."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import celery_durable as cd
from celery_durable import (
    PendingSignalsFull,
    UnknownQuery,
    WorkflowAlreadyCompleted,
    WorkflowCancelled,
    WorkflowNotFound,
    WorkflowStatus,
)
from tests.support.refusals import assert_refused_once
from tests.support.services import effects
from tests.support.waiting import wait_until


def waiting(handle: cd.WorkflowHandle) -> bool:
    return handle.status() is WorkflowStatus.WAITING


def test_signal_after_the_wait_resumes_the_run(basic_app, shared_worker, key):
    handle = basic_app.booking.delay(key, 60)
    wait_until(lambda: waiting(handle), 30, message="the run to wait")
    record = handle.record()
    assert record.owner is None and record.wait_signal == "approval"  # no lease held
    assert handle.signal("approval", {"by": "alice"})
    assert handle.get(timeout=30) == {"status": "confirmed", "receipt": 20}


def test_signal_sent_before_the_wait_is_kept(basic_app, shared_worker, key, rds):
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.booking.delay(key, 60)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    assert handle.signal("approval", {"by": "early"})
    rds.delete(f"block:{key}:s1")
    assert handle.get(timeout=30)["status"] == "confirmed"
    assert handle.query() == {"stage": "approved", "by": "early"}


def test_wait_times_out_with_none(basic_app, shared_worker, key):
    handle = basic_app.booking.delay(key, 0.3)
    assert handle.get(timeout=30) == {"status": "expired", "hold": 10}
    # The timeout was recorded as the wait step's output: a later signal is refused.
    with pytest.raises(WorkflowAlreadyCompleted):
        handle.signal("approval", {"by": "late"})


def test_a_signal_without_a_payload_is_not_a_timeout(basic_app, shared_worker, key):
    handle = basic_app.approval_or_timeout.delay(key, 3600)
    wait_until(lambda: waiting(handle), 30, message="the run to wait")
    assert handle.signal("approval")  # no payload: None
    # The first attempt fails after the wait; the second replays it from its record.
    assert handle.get(timeout=30) == [None, 2]
    assert handle.steps()[0].output == "null"  # the payload, as sent


def test_a_timeout_returns_the_default_on_replay_too(basic_app, shared_worker, key):
    handle = basic_app.approval_or_timeout.delay(key, 0.3)
    assert handle.get(timeout=30) == ["timed out", 2]
    step = handle.steps()[0]
    assert step.status == "ok" and step.output is None  # no payload: a timeout


def test_repeated_idempotency_key_is_a_no_op(basic_app, shared_worker, key):
    handle = basic_app.collector.delay(key, 2)
    assert handle.signal("item", 1, idempotency_key="once")
    assert not handle.signal("item", 1, idempotency_key="once")
    assert handle.signal("item", 2, idempotency_key="twice")
    assert handle.get(timeout=30) == [1, 2]


def test_signals_of_one_name_are_consumed_in_order(basic_app, shared_worker, key, rds):
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.collector.delay(key, 4)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    for n in range(3):
        handle.signal("item", {"n": n})
    rds.delete(f"block:{key}:s1")
    wait_until(lambda: waiting(handle), 30, message="the run to wait for the 4th")
    handle.signal("item", {"n": 3})
    assert handle.get(timeout=30) == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]


def test_pending_signals_are_capped(basic_app, shared_worker, key):
    cap = basic_app.durable.config.max_pending_signals
    handle = basic_app.collector.delay(key, 1)
    wait_until(lambda: waiting(handle), 30, message="the run to wait")
    for n in range(cap):
        handle.signal("unrelated", n)
    with pytest.raises(PendingSignalsFull, match=f"{cap} unconsumed signals"):
        handle.signal("unrelated", cap)
    with pytest.raises(PendingSignalsFull):  # the cap counts every name
        handle.signal("item", "done")
    handle.cancel("test over")


def test_signal_errors_name_the_run(basic_app, shared_worker, key):
    with pytest.raises(WorkflowNotFound, match=f"missing-{key}"):
        cd.WorkflowHandle(basic_app.durable, f"missing-{key}").signal("approval", {})
    done = basic_app.context_probe.delay(key)
    done.get(timeout=30)
    with pytest.raises(WorkflowAlreadyCompleted, match="SUCCEEDED"):
        done.signal("approval", {})
    with pytest.raises(TypeError, match="payload of signal 'approval'"):
        done.signal("approval", object())


@pytest.mark.parametrize("store_first", [False, True])
def test_broker_only_signal_path(basic_app, shared_worker, key, store_first):
    handle = basic_app.booking.delay(key, 60)
    wait_until(lambda: waiting(handle), 30, message="the run to wait")
    message_id = basic_app.durable.send_signal(
        handle.id, "approval", {"by": "bob"}, store_first=store_first
    )
    assert isinstance(message_id, str)
    if store_first:  # stored before send_signal returned: no worker had to store it
        assert _signal_rows(basic_app, handle.id)[0].payload == '{"by":"bob"}'
    assert handle.get(timeout=30)["status"] == "confirmed"
    assert handle.query() == {"stage": "approved", "by": "bob"}


def _signal_rows(basic_app, run_id: str) -> list:  # type: ignore[no-untyped-def]
    store = basic_app.durable.runtime.store
    signals = store.tables.signals
    with store.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(signals.c.name, signals.c.payload, signals.c.consumed_at, signals.c.error)
                .where(
                    signals.c.namespace == basic_app.durable.config.namespace,
                    signals.c.run_id == run_id,
                )
                .order_by(signals.c.id)
            ).all()
        )


def test_malformed_signal_messages_are_logged_and_never_become_data(basic_app, shared_worker, key):
    """Bug: raw messages with a payload that is not JSON, a name that is not a string, or
    ids too long or not Unicode were stored as data (or made the task fail, signal lost)."""
    from celery_durable.waits.signals import SIGNAL_TASK

    durable = basic_app.durable
    ns, queue = durable.config.namespace, durable.config.signal_queue
    handle = basic_app.booking.delay(key, 60)
    wait_until(lambda: waiting(handle), 30, message="the run to wait")
    bad = [
        (ns, handle.id, "approval", "not json", None),
        (ns, handle.id, 123, "{}", None),
        (ns, handle.id, {"a": 1}, "{}", None),
        (ns, handle.id, "x" * 300, "{}", None),
        (ns, "y" * 300, "approval", "{}", None),
        (ns, handle.id + "\x00", "approval", "{}", None),
        (ns, handle.id, "approval\ud800", "{}", None),
        (ns, handle.id, "approval", "{}", "k" * 300),
    ]
    for args in bad:
        basic_app.app.send_task(SIGNAL_TASK, args=args, queue=queue)
    wait_until(
        lambda: shared_worker.log().count("malformed signal message") >= len(bad),
        30,
        message=lambda: f"every malformed message to be logged:\n{shared_worker.log()[-3000:]}",
    )
    rows = _signal_rows(basic_app, handle.id)
    assert rows and all(r.consumed_at is not None and r.error for r in rows), rows
    assert any("payload is not valid JSON" in r.error for r in rows)
    assert any("signal name is int" in r.error for r in rows)
    assert waiting(handle)  # nothing was consumed as the approval
    handle.signal("approval", {"by": "dave"})  # a good one still goes through
    assert handle.get(timeout=30)["status"] == "confirmed"
    assert handle.query() == {"stage": "approved", "by": "dave"}


def test_signal_and_wake_messages_no_worker_can_serve_are_refused_once(
    basic_app, shared_worker, key
):
    """Bug (issue 20): a celery_durable.signal message with the wrong number of arguments
    raised TypeError, a celery_durable.wake for a namespace no app has LookupError, and a
    wake naming an id with NUL psycopg.DataError: each a raw traceback in the worker."""
    from celery_durable.waits.signals import SIGNAL_TASK, WAKE_TASK

    durable = basic_app.durable
    ns, queue = durable.config.namespace, durable.config.signal_queue
    handle = basic_app.booking.delay(key, 60)
    wait_until(lambda: waiting(handle), 30, message="the run to wait")
    approval = (ns, handle.id, "approval", '{"by":"x"}')
    bad = {
        f"few-{key}": (SIGNAL_TASK, (ns, handle.id), {}),
        f"many-{key}": (SIGNAL_TASK, (*approval, None, 0, 1), {}),
        f"kwarg-{key}": (SIGNAL_TASK, approval, {"colour": "red"}),
        f"tries-{key}": (SIGNAL_TASK, (ns, f"ghost-{key}", "a", "1"), {"not_found_tries": "x"}),
        f"ghost-ns-{key}": (WAKE_TASK, (f"no-such-{key}", handle.id, "approval"), {}),
        f"wake-few-{key}": (WAKE_TASK, (ns, handle.id), {}),
        f"wake-nul-{key}": (WAKE_TASK, (ns, handle.id + "\x00", "approval"), {}),
    }
    since = len(shared_worker.log())
    for task_id, (task, args, kwargs) in bad.items():
        basic_app.app.send_task(task, args=args, kwargs=kwargs, queue=queue, task_id=task_id)
    tail = assert_refused_once(shared_worker, since, dict.fromkeys(bad, queue))
    assert "no Durable serves the namespace" in tail and "NUL" in tail
    assert _signal_rows(basic_app, handle.id) == []  # nothing stored
    assert waiting(handle)  # nothing woke it
    handle.signal("approval", {"by": "erin"})  # a good one still goes through
    assert handle.get(timeout=30)["status"] == "confirmed"


def test_send_signal_to_a_missing_run_raises(basic_app, shared_worker, key):
    """Bug: durable.send_signal() returned a message id and raised nothing; the refusal
    appeared only in a worker's log seconds later."""
    with pytest.raises(WorkflowNotFound, match=f"ghost-{key}"):
        basic_app.durable.send_signal(f"ghost-{key}", "approval", {"by": "nobody"})
    assert _signal_rows(basic_app, f"ghost-{key}") == []  # nothing stored, nothing sent


def test_broker_only_signal_errors_are_logged_and_kept(basic_app, shared_worker, key):
    """Through the broker (store_first=False), only a worker can tell that a run doesn't
    exist. A signal refused for a run that exists is kept with the reason; one for a run
    that does not exist is logged and not kept (before, it was kept forever: gc never
    deletes it, as no run's deletion takes it)."""
    durable = basic_app.durable
    since = len(shared_worker.log())
    durable.send_signal(f"ghost-{key}", "approval", {"by": "nobody"}, store_first=False)
    finished = basic_app.booking.delay(key, 60)
    wait_until(lambda: waiting(finished), 30, message="the run to wait")
    finished.cancel()
    durable.send_signal(finished.id, "approval", {"by": "late"}, idempotency_key=f"late-{key}")
    signals = durable.runtime.store.tables.signals

    def errors(run_id: str) -> list[str]:
        with durable.runtime.store.engine.connect() as conn:
            query = sa.select(signals.c.error).where(
                signals.c.run_id == run_id, signals.c.error.isnot(None)
            )
            return list(conn.execute(query).scalars())

    def refused(run_id: str) -> str | None:
        lines = [line for line in shared_worker.log()[since:].splitlines() if run_id in line]
        return next((line for line in lines if "signal 'approval'" in line), None)

    line = wait_until(lambda: refused(f"ghost-{key}"), 30, message="the ghost's refusal")
    assert "refused, not kept (no such run)" in line and "no workflow run with id" in line, line
    assert errors(f"ghost-{key}") == []
    kept = wait_until(lambda: errors(finished.id), 30, message="the refused signal to be kept")
    assert len(kept) == 1 and kept[0].startswith("WorkflowAlreadyCompleted"), kept


def test_query_before_and_after_set_state(basic_app, shared_worker, key, rds):
    handle = basic_app.booking.delay(key, 60)
    wait_until(lambda: waiting(handle), 30, message="the run to wait")
    assert handle.query() == 10  # no set_state yet: the last finished step's output
    with pytest.raises(UnknownQuery, match="progress"):
        handle.query("progress")
    handle.signal("approval", {"by": "carol"})
    handle.get(timeout=30)
    assert handle.query("state") == {"stage": "approved", "by": "carol"}
    with pytest.raises(WorkflowNotFound):
        cd.WorkflowHandle(basic_app.durable, f"nope-{key}").query()


def test_cancel_a_pending_run(basic_app, key):
    handle = basic_app.cancellable.apply_async(args=(key,), queue=f"nobody-{key}")
    assert handle.cancel("changed my mind") is WorkflowStatus.CANCELLED
    assert handle.status() is WorkflowStatus.CANCELLED
    assert handle.record().due_at is None  # the sweeper won't publish it again
    with pytest.raises(WorkflowCancelled, match="changed my mind"):
        handle.get(timeout=5)


def test_cancel_a_running_run_at_its_next_step(basic_app, shared_worker, key, rds):
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.cancellable.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    assert handle.cancel("stop") is WorkflowStatus.RUNNING
    rds.delete(f"block:{key}:s1")
    with pytest.raises(WorkflowCancelled) as cancelled:
        handle.get(timeout=30)
    assert cancelled.value.reason == "stop"
    assert not isinstance(cancelled.value, Exception)  # except Exception can't swallow it
    assert effects(rds, key, "s1") == 1 and effects(rds, key, "s2") == 0
    # Step 1 ran to its end: it is recorded (its side effect happened), nothing after it.
    steps = basic_app.durable.runtime.store.load_steps(handle.id)
    assert [(idx, step.status, step.output) for idx, step in steps.items()] == [(0, "ok", "10")]


def test_cancel_a_waiting_run_drops_its_timer_and_signals(basic_app, shared_worker, key):
    handle = basic_app.collector.delay(key, 2)
    wait_until(lambda: waiting(handle), 30, message="the run to wait")
    handle.signal("item", "one")

    def waits_for_the_second() -> bool:
        # Step 1 consumed "one" and step 2 is the next wait (step 1's waiting row alone
        # exists before the signal is consumed, so counting rows would race the wake-up).
        steps = basic_app.durable.runtime.store.load_steps(handle.id)
        return 1 in steps and steps[1].status == "ok" and 2 in steps and waiting(handle)

    wait_until(waits_for_the_second, 30, message="the first signal to be consumed")
    handle.signal("unrelated", "pending")
    assert handle.cancel() is WorkflowStatus.CANCELLED
    signals = basic_app.durable.runtime.store.tables.signals
    with basic_app.durable.runtime.store.engine.connect() as conn:
        left = conn.execute(
            sa.select(sa.func.count())
            .select_from(signals)
            .where(signals.c.run_id == handle.id, signals.c.consumed_at.is_(None))
        ).scalar()
    assert left == 0
    with pytest.raises(WorkflowCancelled):
        handle.get(timeout=5)


def test_cancel_a_finished_run_raises(basic_app, shared_worker, key):
    handle = basic_app.context_probe.delay(key)
    handle.get(timeout=30)
    with pytest.raises(WorkflowAlreadyCompleted, match="SUCCEEDED"):
        handle.cancel()
    with pytest.raises(WorkflowNotFound):
        cd.WorkflowHandle(basic_app.durable, f"nope-{key}").cancel()


def test_timer_fires_after_its_deadline(basic_app, shared_worker, key):
    handle = basic_app.sleeper.delay(key, 1.0)
    # Never early: the steps around the sleep stamp the (one) machine clock. How soon after
    # the deadline it fires is a latency figure for the benchmark suite, not asserted here.
    assert handle.get(timeout=30) >= 1.0


def test_a_thousand_sleeping_workflows_do_not_block_new_work(basic_app, shared_worker, key):
    sleepers = [basic_app.long_sleeper.apply_async(args=(f"{key}-{n}",)) for n in range(1000)]
    store = basic_app.durable.runtime.store
    runs = store.tables.runs

    def all_waiting() -> bool:
        with store.engine.connect() as conn:
            return (
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(runs)
                    .where(runs.c.id.in_([h.id for h in sleepers]), runs.c.status == "WAITING")
                ).scalar()
                == 1000
            )

    wait_until(all_waiting, 120, 0.5, message="1,000 workflows to be sleeping")
    # Had the sleepers kept their slots, this would wait an hour behind them.
    assert basic_app.five_steps.delay(key).get(timeout=90) == [10, 20, 30, 40, 50]
    for handle in sleepers:
        handle.cancel("test over")


def test_set_state_of_a_value_json_cannot_hold_fails_at_once(basic_app, shared_worker, key, rds):
    """Bug: a plain TypeError made the workflow retry max_attempts times to no purpose."""
    handle = basic_app.state_of_object.delay(key)
    with pytest.raises(cd.WorkflowFailed) as failed:
        handle.get(timeout=30)
    assert failed.value.error_type == "celery_durable.errors.NotSerialisable"
    assert "set_state('state')" in failed.value.error_message
    assert effects(rds, key, "body") == 1  # not retried
