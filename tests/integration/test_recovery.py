"""Crashes, zombies, duplicate deliveries and lost publishes, with real processes.

Workers here are started per test (never the module's shared worker) because tests
SIGKILL or SIGSTOP them.
"""

from __future__ import annotations

import os
import signal

import pytest
import sqlalchemy as sa

from celery_durable import WorkflowFailed, WorkflowStatus
from tests.support.builders import new_run
from tests.support.pgconns import backends_held_by, named_url
from tests.support.services import PG_URL, effects, unique
from tests.support.waiting import wait_until


def test_sigkill_mid_step_resumes_on_another_worker(basic_app, start_worker, key, rds):
    rds.set(f"block:{key}:s3", "1")
    first = start_worker("crash-a")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s3"), 30, message="step 3 to start")
    first.kill()  # main process and pool children, at once
    rds.delete(f"block:{key}:s3")
    second = start_worker("crash-b")
    # Its lease runs out and a sweep dispatches it again; how soon is a latency figure for
    # the benchmark suite, not something to assert on a loaded machine.
    assert handle.get(timeout=60) == [10, 20, 30, 40, 50]
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1, 1, 2, 1, 1]
    assert "dispatched workflow tests.apps.basic.five_steps" in second.log()
    # A lost worker is a recovery, not a failed attempt of the run.
    assert (handle.record().attempts, handle.record().recoveries) == (1, 1)


def test_zombie_with_a_stale_fence_cannot_record_or_settle(basic_app, start_worker, key, rds):
    rds.set(f"block:{key}:s3", "1")
    zombie = start_worker("zombie")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s3"), 30, message="step 3 to start")
    os.killpg(zombie.proc.pid, signal.SIGSTOP)  # paused: no heartbeat, lease runs out
    try:
        rds.delete(f"block:{key}:s3")
        start_worker("successor")
        assert handle.get(timeout=60) == [10, 20, 30, 40, 50]
    finally:
        os.killpg(zombie.proc.pid, signal.SIGCONT)
    wait_until(
        lambda: "lost its lease" in zombie.log(),
        30,
        message=lambda: f"the zombie to notice; its log:\n{zombie.log()}",
    )
    assert effects(rds, key, "s3") == 2  # ran by both...
    assert effects(rds, key, "s4") == 1  # ...but the zombie stopped at its next step write
    steps = basic_app.durable.runtime.store.load_steps(handle.id)
    assert len(steps) == 5 and handle.get(timeout=1) == [10, 20, 30, 40, 50]


def test_duplicate_delivery_runs_one_body_at_a_time(basic_app, start_worker, key, rds):
    rds.set(f"block:{key}:s1", "1")
    worker = start_worker("dupes", concurrency=2)
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    run = handle.record()
    basic_app.durable.runtime.publish(run.id, run.name, run.args, run.queue)  # a second delivery
    wait_until(
        lambda: f"run {handle.id} not claimed" in worker.log(),
        30,
        message="the second delivery to be acknowledged without running",
    )
    rds.delete(f"block:{key}:s1")
    assert handle.get(timeout=30) == [10, 20, 30, 40, 50]
    assert effects(rds, key, "s1") == 1


def test_lost_publish_is_dispatched_by_the_sweeper(basic_app, start_worker, key):
    durable = basic_app.durable
    start_worker("sweeps")
    stored = durable.runtime.store.insert_run(
        new_run(
            f"lost-{key}",
            name="tests.apps.basic.context_probe",
            args=f'[["{key}"],{{}}]',
            retry_backoff=1.0,
            grace=durable.config.dispatch_grace,
        )
    )
    assert stored
    handle = durable.get_handle(f"lost-{key}")
    assert handle.status() is WorkflowStatus.PENDING
    assert handle.get(timeout=30)["id"] == f"lost-{key}"


def test_warm_shutdown_lets_the_running_workflow_finish(basic_app, start_worker, key, rds):
    rds.set(f"block:{key}:s2", "1")
    worker = start_worker("warm")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s2"), 30, message="step 2 to start")
    worker.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "Warm shutdown" in worker.log(), 30, message="warm shutdown")
    rds.delete(f"block:{key}:s2")
    assert worker.wait_exit(30) == 0
    assert handle.status() is WorkflowStatus.SUCCEEDED
    assert handle.record().owner is None
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1] * 5


def test_a_run_that_keeps_killing_its_worker_ends_failed(basic_app, start_worker, key, rds):
    """Lost workers use the recoveries budget (3 in the tests), not the attempts (2)."""
    start_worker("victim")
    handle = basic_app.suicidal.delay(key)
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=90)
    assert failed.value.error_type == "celery_durable.errors.WorkerLost"
    assert "lost 3 times (durable_max_recoveries=3)" in failed.value.error_message
    assert effects(rds, key, "kill") == 3
    assert handle.record().attempts <= 1


def test_timers_fire_from_another_worker_after_a_sigkill(basic_app, start_worker, key):
    first = start_worker("timers-a")
    handles = [basic_app.sleeper.delay(f"{key}-{n}", 2.0) for n in range(5)]
    wait_until(
        lambda: all(h.status() is WorkflowStatus.WAITING for h in handles),
        30,
        message="the sleepers to suspend",
    )
    first.kill()
    start_worker("timers-b")
    for handle in handles:
        assert handle.get(timeout=60) >= 2.0


def test_cold_shutdown_gives_the_lease_back_at_once(basic_app, start_worker, key, rds):
    """Bug: the pool child read the worker's shutdown flags, which only the main process
    sets, so the SIGTERM a cold shutdown sends its children was settled as a failed
    attempt (PENDING all the same, through the retry)."""
    rds.set(f"block:{key}:s3", "1")
    worker = start_worker("cold")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s3"), 30, message="step 3 to start")
    worker.proc.send_signal(signal.SIGQUIT)  # cold shutdown: running tasks are stopped
    worker.wait_exit(30)
    record = handle.record()
    assert record.owner is None
    assert record.status == "PENDING"  # released, not left to a lease timeout
    assert (record.attempts, record.recoveries) == (0, 0)  # the attempt was given back
    assert f"run {handle.id} interrupted by a terminate signal" in worker.log()
    assert f"run {handle.id} failed" not in worker.log()
    rds.delete(f"block:{key}:s3")
    start_worker("after-cold")
    assert handle.get(timeout=60) == [10, 20, 30, 40, 50]
    assert effects(rds, key, "s2") == 1 and effects(rds, key, "s3") == 2
    assert handle.record().attempts == 1


def test_cold_shutdown_does_not_use_up_the_only_attempt(basic_app, start_worker, key, rds):
    """Bug: with max_attempts=1 a cold shutdown failed the run for good with
    ``SystemExit: -241`` (billiard's exit on the SIGTERM sent to the pool child)."""
    rds.set(f"block:{key}:s2", "1")
    worker = start_worker("cold-one")
    handle = basic_app.one_attempt.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s2"), 30, message="step 2 to start")
    worker.proc.send_signal(signal.SIGQUIT)
    worker.wait_exit(30)
    record = handle.record()
    assert (record.status, record.attempts, record.error) == ("PENDING", 0, None), record
    rds.delete(f"block:{key}:s2")
    start_worker("after-cold-one")
    assert handle.get(timeout=60) == [10, 20, 30]
    assert (handle.record().attempts, handle.record().recoveries) == (1, 0)
    assert effects(rds, key, "s1") == 1 and effects(rds, key, "s2") == 2


def test_a_hard_time_limit_still_uses_up_the_attempt(basic_app, start_worker, key, rds):
    """billiard ends an overrunning child with the SIGTERM a cold shutdown sends: that one
    is the run's failure, or a run that always overruns would be handed back forever."""
    rds.set(f"block:{key}:s1", "1")  # outlasts the 4 s limit
    worker = start_worker("overrun")
    handle = basic_app.overruns.delay(key)
    try:
        with pytest.raises(WorkflowFailed):
            handle.get(timeout=90)
    finally:
        rds.delete(f"block:{key}:s1")
    assert "Hard time limit (4" in worker.log()
    assert f"run {handle.id} interrupted" not in worker.log()


def test_workflows_survive_the_database_dropping_every_connection(
    basic_app, start_worker, key, rds
):
    """A Postgres restart or an idle-connection killer: the held hot-path connection,
    the pool, the sweeper and the LISTEN waiter all reconnect."""
    # The worker's sessions and this process's are dropped, not other test sessions'.
    application_name = unique("cdkilled")
    rds.set(f"block:{key}:s2", "1")
    start_worker("reconnects", env={"CELERY_DURABLE_DATABASE_URL": named_url(application_name)})
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s2"), 30, message="step 2 to start")
    own = backends_held_by(os.getpid(), "celery_durable")
    assert own  # the test's own store, which started the run
    engine = sa.create_engine(PG_URL, connect_args={"application_name": "the-killer"})
    with engine.connect() as conn:
        killed, killed_own = conn.execute(
            sa.text(
                "SELECT count(*) FILTER (WHERE application_name = :name),"
                " count(*) FILTER (WHERE pid = ANY(:own)) FROM ("
                "  SELECT pid, application_name, pg_terminate_backend(pid) AS terminated"
                "  FROM pg_stat_activity WHERE application_name = :name OR pid = ANY(:own)"
                ") AS sessions WHERE terminated"
            ),
            {"name": application_name, "own": own},
        ).one()
    engine.dispose()
    assert killed_own >= 1
    assert killed >= 2  # at least the worker child's held connection and the sweeper's
    rds.delete(f"block:{key}:s2")
    assert handle.get(timeout=60) == [10, 20, 30, 40, 50]
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1] * 5


def test_a_worker_starts_with_a_backlog_in_its_queues(basic_app, start_worker, key):
    """Bug (RabbitMQ): the signal queue was added by a consumer bootstep before the event
    loop set the message callback, so a backlog crashed the worker at start (rc 1)."""
    handles = [basic_app.context_probe.delay(f"{key}-{n}") for n in range(4)]
    handles.append(basic_app.booking.delay(key, 60))
    worker = start_worker("backlog")
    for handle in handles[:4]:
        assert handle.get(timeout=60)["id"] == handle.id
    wait_until(lambda: handles[4].status() is WorkflowStatus.WAITING, 60, message="WAITING")
    assert handles[4].signal("approval", {"by": "backlog"})  # the signal queue is consumed
    assert handles[4].get(timeout=60)["status"] == "confirmed"
    assert worker.proc.poll() is None, worker.log()
    assert "Consumer does not have any callbacks" not in worker.log()


def test_lost_workers_do_not_use_up_the_attempts(basic_app, start_worker, key, rds):
    """Bug: a run whose worker crashed max_attempts times ended FAILED as 'worker lost',
    although nothing was wrong with the run. Here: one attempt, two lost workers."""
    handle = basic_app.one_attempt.delay(key)
    rds.set(f"block:{key}:s2", "1")
    for n in range(2):
        rds.delete(f"started:{key}:s2")
        doomed = start_worker(f"lost-{n}")
        wait_until(lambda: rds.get(f"started:{key}:s2"), 60, message="step 2 to start")
        doomed.kill()
    rds.delete(f"block:{key}:s2")
    start_worker("survivor")
    assert handle.get(timeout=90) == [10, 20, 30]
    record = handle.record()
    assert (record.attempts, record.recoveries) == (1, 2)
    assert effects(rds, key, "s1") == 1 and effects(rds, key, "s2") == 3
