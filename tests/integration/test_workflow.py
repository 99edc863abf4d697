"""Workflows end to end: starting runs (transactional ones too), their handles, step and
workflow retries and failures. What keeps runs of other namespaces, apps and queues apart
is test_workflow_isolation.py. A real prefork worker, Redis broker, Postgres store."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError
from sqlalchemy.orm import Session

import celery_durable as cd
from celery_durable import (
    DuplicateRegistration,
    Durable,
    WorkflowAlreadyExists,
    WorkflowFailed,
    WorkflowNotFound,
    WorkflowStatus,
)
from tests.support.builders import new_run
from tests.support.services import PG_URL, UNREACHABLE_BROKER_URL, effects
from tests.support.waiting import wait_until


def test_workflow_runs_its_steps_and_returns(basic_app, shared_worker, key, rds):
    handle = basic_app.five_steps.delay(key)
    assert isinstance(handle, cd.WorkflowHandle)
    assert handle.get(timeout=30) == [10, 20, 30, 40, 50]
    assert handle.status() is WorkflowStatus.SUCCEEDED
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1] * 5
    steps = basic_app.durable.runtime.store.load_steps(handle.id)
    assert [s.name for s in steps.values()] == ["tests.apps.basic.numbered"] * 5
    assert steps[0].input == f'[["{key}",1],{{}}]' and steps[0].output == "10"


def test_workflow_is_a_celery_task_named_like_celery_names_tasks(basic_app, shared_worker):
    assert basic_app.five_steps.name == "tests.apps.basic.five_steps"
    assert isinstance(basic_app.app.tasks["tests.apps.basic.five_steps"], cd.WorkflowTask)
    assert "tests.apps.basic.five_steps" in shared_worker.log()  # the worker's [tasks] list


def test_handle_id_is_the_celery_task_id(basic_app, shared_worker, key):
    handle = basic_app.context_probe.apply_async(args=(key,), run_id=f"probe-{key}")
    assert handle.id == f"probe-{key}"
    result = handle.get(timeout=30)
    assert result == {
        "id": f"probe-{key}",
        "name": "tests.apps.basic.context_probe",
        "active": True,
    }
    assert not cd.WorkflowContext.is_active() and cd.WorkflowContext.current() is None


def test_get_handle_finds_existing_runs_only(basic_app, shared_worker, key):
    handle = basic_app.context_probe.apply_async(args=(key,), run_id=f"h-{key}")
    assert basic_app.durable.get_handle(f"h-{key}") == handle
    with pytest.raises(WorkflowNotFound, match=f"nope-{key}"):
        basic_app.durable.get_handle(f"nope-{key}")


def test_duplicate_id_raises_unless_if_exists_return(basic_app, shared_worker, key, rds):
    first = basic_app.five_steps.apply_async(args=(key,), run_id=f"dup-{key}")
    with pytest.raises(WorkflowAlreadyExists, match=f"dup-{key}"):
        basic_app.five_steps.apply_async(args=(key,), run_id=f"dup-{key}")
    again = basic_app.five_steps.apply_async(args=(key,), run_id=f"dup-{key}", if_exists="return")
    assert again == first
    first.get(timeout=30)
    assert effects(rds, key, "s1") == 1


def test_non_serialisable_argument_raises_before_anything_is_written(basic_app, key):
    with pytest.raises(TypeError, match="argument 'key' of workflow tests.apps.basic.five_steps"):
        basic_app.five_steps.apply_async(args=(object(),), run_id=f"bad-{key}")
    with pytest.raises(TypeError, match="five_steps"):
        basic_app.five_steps.apply_async(args=(key, "extra"), run_id=f"bad2-{key}")
    assert basic_app.durable.runtime.store.get_run(f"bad-{key}") is None
    assert basic_app.durable.runtime.store.get_run(f"bad2-{key}") is None


def test_transactional_start_publishes_after_commit(basic_app, shared_worker, key):
    engine = sa.create_engine(PG_URL)
    try:
        with engine.begin() as conn:
            handle = basic_app.five_steps.apply_async(
                args=(key,), run_id=f"tx-{key}", connection=conn
            )
            conn.execute(sa.text("SELECT 1"))
        assert handle.get(timeout=30) == [10, 20, 30, 40, 50]
        with Session(engine) as session, session.begin():
            via_session = basic_app.five_steps.apply_async(
                args=(key + "s",), run_id=f"txs-{key}", connection=session
            )
        assert via_session.get(timeout=30) == [10, 20, 30, 40, 50]
    finally:
        engine.dispose()


def test_transactional_start_rolled_back_never_exists(basic_app, shared_worker, key, rds):
    engine = sa.create_engine(PG_URL)
    try:
        with engine.connect() as conn:
            tx = conn.begin()
            basic_app.five_steps.apply_async(args=(key,), run_id=f"rb-{key}", connection=conn)
            tx.rollback()
        with Session(engine) as session:
            session.begin()
            basic_app.five_steps.apply_async(args=(key,), run_id=f"rbs-{key}", connection=session)
            session.rollback()
    finally:
        engine.dispose()
    # A later run on the same queue finishing proves the worker drained the queue.
    basic_app.context_probe.delay(key).get(timeout=30)
    for run_id in (f"rb-{key}", f"rbs-{key}"):
        with pytest.raises(WorkflowNotFound):
            basic_app.durable.get_handle(run_id)
    assert effects(rds, key, "s1") == 0


def test_step_retries_then_succeeds(basic_app, shared_worker, key, rds):
    assert basic_app.step_retries.delay(key, 2).get(timeout=30) == 3
    assert effects(rds, key, "flaky_step") == 3


def test_step_out_of_attempts_fails_the_workflow(basic_app, shared_worker, key, rds):
    handle = basic_app.step_retries.delay(key, 5)
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=30)
    assert failed.value.error_type == "builtins.ConnectionError"
    assert "transient 3" in failed.value.error_message
    assert "flaky_step" in failed.value.error_traceback
    assert effects(rds, key, "flaky_step") == 3


def test_dont_retry_on_fails_the_step_at_once(basic_app, shared_worker, key, rds):
    handle = basic_app.not_retried_step.delay(key)
    with pytest.raises(WorkflowFailed, match="KeyError"):
        handle.get(timeout=30)
    # The failed step is the frontier: each workflow attempt runs it again, once.
    assert effects(rds, key, "keyerror_step") == 3
    assert handle.record().attempts == 3


def test_workflow_retries_resume_after_finished_steps(basic_app, shared_worker, key, rds):
    handle = basic_app.flaky.delay(key, 2)
    assert handle.get(timeout=30) == "ok"
    assert effects(rds, key, "body") == 3
    assert effects(rds, key, "s1") == 1  # replayed from history on attempts 2 and 3
    assert handle.record().attempts == 3


def test_workflow_out_of_attempts_ends_failed(basic_app, shared_worker, key, rds):
    handle = basic_app.flaky.delay(key, 10)
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=30)
    assert failed.value.error_type == "builtins.RuntimeError"
    assert failed.value.error_message == f"flaky failure {key}"
    assert "raise RuntimeError" in failed.value.error_traceback
    assert handle.status() is WorkflowStatus.FAILED
    assert effects(rds, key, "body") == 3


def test_permanent_error_fails_without_retry(basic_app, shared_worker, key, rds):
    handle = basic_app.permanent.delay(key)
    with pytest.raises(WorkflowFailed, match="PermanentError"):
        handle.get(timeout=30)
    assert effects(rds, key, "body") == 1


def test_caught_step_failure_replays_the_same_exception(basic_app, shared_worker, key, rds):
    handle = basic_app.catches.delay(key)
    assert handle.get(timeout=30) == f"bad value {key}"
    assert effects(rds, key, "body") == 2  # the body ran twice...
    assert effects(rds, key, "caught") == 1  # ...the failed step once: replayed from history
    assert effects(rds, key, "s2") == 1


def test_changed_code_raises_nondeterminism_without_retry(basic_app, shared_worker, key, rds):
    handle = basic_app.drifting.delay(key)
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=30)
    assert failed.value.error_type == "celery_durable.errors.NonDeterminismError"
    assert "step 0" in failed.value.error_message
    assert "tests.branch_a" in failed.value.error_message
    assert "tests.branch_b" in failed.value.error_message
    assert effects(rds, key, "body") == 2  # attempt 2 hit the guard; no attempt 3


def test_base_exception_from_user_code_is_settled(basic_app, shared_worker, key):
    handle = basic_app.interrupted.delay(key)
    with pytest.raises(WorkflowFailed, match="KeyboardInterrupt"):
        handle.get(timeout=30)


def test_get_timeout_raises_celery_timeout_and_run_goes_on(basic_app, shared_worker, key, rds):
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.five_steps.delay(key)
    with pytest.raises(CeleryTimeoutError):
        handle.get(timeout=0.3)
    rds.delete(f"block:{key}:s1")
    assert handle.get(timeout=30) == [10, 20, 30, 40, 50]


def test_registering_twice_under_one_name_fails(basic_app):
    durable = basic_app.durable
    with pytest.raises(DuplicateRegistration, match="tests.apps.basic.five_steps"):
        durable.workflow(name="tests.apps.basic.five_steps")(lambda key: None)
    with pytest.raises(DuplicateRegistration, match="tests.branch_a"):
        durable.step(name="tests.branch_a")(lambda key: None)

    @basic_app.app.task(name=f"tests.plain_task_{id(durable)}", shared=False, lazy=False)
    def plain() -> None:
        return None

    with pytest.raises(DuplicateRegistration, match="a Celery task named"):
        durable.workflow(name=f"tests.plain_task_{id(durable)}")(lambda: None)


def test_steps_outside_a_workflow_are_plain_calls(basic_app, key, rds):
    assert basic_app.numbered(key, 4) == 40
    assert effects(rds, key, "s4") == 1
    assert basic_app.durable.runtime.store.load_steps(key) == {}


def test_calling_a_workflow_directly_raises_before_anything_runs(basic_app, key, rds):
    """Bug: the body ran outside any run, its steps for real, until set_state failed."""
    for call in (basic_app.five_steps, basic_app.five_steps.run):
        with pytest.raises(TypeError, match=r"five_steps.*\.delay\(\).*\.apply\(\)") as raised:
            call(key)
        assert "called directly" in str(raised.value)
    assert effects(rds, key, "s1") == 0  # not even its first step ran
    assert basic_app.durable.runtime.store.get_status(key) is None


def test_get_is_woken_by_notify_not_by_polling(basic_app, shared_worker, key, rds, monkeypatch):
    from celery_durable.store.db.listener import Listener

    # The polling fallback now sleeps longer than the timeout: only NOTIFY can wake get().
    monkeypatch.setattr(Listener, "first_poll", 120.0)
    monkeypatch.setattr(Listener, "max_poll", 120.0)
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    with basic_app.durable.runtime.store.listener() as listener:
        assert listener.conn is not None  # LISTENing, not polling
    rds.delete(f"block:{key}:s1")
    assert handle.get(timeout=30, interval=120) == [10, 20, 30, 40, 50]


def test_publish_failure_after_insert_names_the_stored_run(basic_app, shared_worker, key):
    """The producer's broker is down: the run is stored, the error says so (bug: a caller
    that retried after the error started a duplicate), and a worker's sweeper sends it."""
    from kombu.exceptions import OperationalError

    from celery_durable import RunNotPublished

    producer_app = Celery("producer", broker=UNREACHABLE_BROKER_URL)
    producer_app.conf.update(
        task_publish_retry=False,
        broker_connection_retry=False,
        broker_connection_max_retries=0,
        broker_connection_timeout=1,
        # The producer routes like the workers do: the run is stored with that queue.
        task_default_queue=basic_app.app.conf.task_default_queue,
    )
    producer = Durable(producer_app)  # same store and namespace (env), broken broker

    @producer.workflow(name="tests.apps.basic.context_probe")
    def probe(k: str) -> dict:
        return {}

    run_id = f"nopub-{key}"
    with pytest.raises(RunNotPublished) as raised:
        probe.apply_async(args=(key,), run_id=run_id)
    error = raised.value
    assert isinstance(error, OperationalError)  # what Celery raises for a broker that is down
    assert error.run_id == run_id and error.handle.id == run_id
    text = str(error)
    assert f"run {run_id!r} is stored (PENDING)" in text
    assert "the sweeper will publish it" in text and "if_exists" in text
    # The retry the message suggests returns the stored run instead of a second one.
    again = probe.apply_async(args=(key,), run_id=run_id, if_exists="return")
    assert again.id == run_id
    result = basic_app.durable.get_handle(run_id).get(timeout=60)
    assert result["id"] == run_id
    producer.runtime.store.dispose()


def test_generated_workflow_ids_are_time_ordered_uuids():
    import time
    import uuid

    from celery_durable.core.ids import time_ordered_id

    first = time_ordered_id()
    wait_until(lambda: time.time_ns() // 1_000_000 > int(first[:13].replace("-", ""), 16), 5)
    second = time_ordered_id()
    assert uuid.UUID(first).version == 7 and uuid.UUID(second).version == 7
    assert first < second and first != second


def test_countdown_is_kept_in_the_database_not_in_an_eta_message(basic_app, shared_worker, key):
    handle = basic_app.context_probe.apply_async(args=(key,), countdown=1.0)
    record = handle.record()
    assert record.status == "PENDING" and record.due_at is not None
    assert handle.get(timeout=30)["id"] == handle.id
    record = handle.record()
    assert record.started_at - record.created_at >= 1.0  # database clock
    with pytest.raises(ValueError, match="countdown or eta"):
        basic_app.context_probe.apply_async(args=(key,), countdown=1, eta=object())


def test_transactional_start_committed_during_the_visibility_wait_is_claimed(basic_app, key):
    """Bug: a COMMIT landing between a failed claim and the row check ended the wait with
    the run unclaimed, leaving it to the sweeper's dispatch grace. The fault point sits
    exactly there; the hook commits the caller's transaction at that moment."""
    from types import SimpleNamespace

    from celery_durable.core import faults
    from celery_durable.runs.task import TRANSACTIONAL_HEADER, execute

    durable = basic_app.durable
    engine = sa.create_engine(PG_URL)
    run_id = f"race-{key}"
    conn = engine.connect()
    tx = conn.begin()
    durable.runtime.store.insert_run(
        new_run(
            run_id, name=basic_app.context_probe.name, args=f'[["{key}"],{{}}]', max_attempts=1
        ),
        conn,
    )
    committed: list[str] = []

    def commit_now(point: str, info: dict) -> None:
        if point == faults.AFTER_CLAIM_MISSED and not committed:
            tx.commit()
            committed.append(info["run_id"])

    request = SimpleNamespace(id=run_id, headers={TRANSACTIONAL_HEADER: True})
    faults.install(commit_now)
    try:
        result = execute(durable.runtime, basic_app.context_probe.definition, request)
    finally:
        faults.install(None)
        conn.close()
        engine.dispose()
    assert committed == [run_id]
    assert result == {"id": run_id, "name": basic_app.context_probe.name, "active": True}
    assert durable.get_handle(run_id).status() is WorkflowStatus.SUCCEEDED
