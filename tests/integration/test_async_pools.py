"""Where async workflow bodies run, on real workers (tests/apps/async_pools.py): each pool's
threads and their event loops (one per prefork process, one per thread of solo and
threads, reused across deliveries), a green pool refused at start, and time limits,
revoke(terminate=True), warm and cold shutdowns and --max-tasks-per-child, each shown to
do to an async body what tests/integration/test_recovery.py, test_revoke.py and
test_liveness.py show they do to a plain one.

One worker per pool, each on a queue of its own, serves the module's tests that don't stop
it; tests that shut a worker down start their own on the session's queue.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from celery_durable import WorkflowCancelled, WorkflowFailed, WorkflowStatus
from tests.conftest import OTHER_QUEUE
from tests.support.services import BROKER_URL, delete_queues, effects, unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker

APP = "tests.apps.async_pools"
POOLS = ("prefork", "solo", "threads")
# The threads pool runs two bodies at once, each on its own thread's loop.
CONCURRENCY = {"prefork": 1, "solo": 1, "threads": 2}
QUEUES = {pool: unique(f"aq-{pool}-") for pool in POOLS}
LONG_LEASE = {"CELERY_DURABLE_LOCK_TIMEOUT": "30"}


@pytest.fixture(scope="module")
def pools(basic_app: object) -> Iterator[dict[str, Worker]]:
    """A worker of each pool, each on its queue (QUEUES), for the module's tests."""
    workers = {
        pool: Worker(
            APP,
            {},
            queues=QUEUES[pool],
            name=unique(f"{pool}-"),
            concurrency=CONCURRENCY[pool],
            pool=pool,
        )
        for pool in POOLS
    }
    try:
        for worker in workers.values():
            worker.wait_ready()
        yield workers
    finally:
        for worker in workers.values():
            worker.kill()
        delete_queues(BROKER_URL, list(QUEUES.values()))


@pytest.fixture(scope="module")
def app() -> object:
    from tests.apps import async_pools

    return async_pools


def probe(app, pool: str, key: str, party: int = 1):  # type: ignore[no-untyped-def]
    """Start a probe on ``pool``'s worker: its handle."""
    return app.probe.apply_async(args=(key, party), queue=QUEUES[pool])


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_an_async_body_runs_on_its_thread_s_loop_reused_by_the_next_delivery(app, pools, key, pool):
    first = probe(app, pool, f"{key}-1").get(timeout=30)
    second = probe(app, pool, f"{key}-2").get(timeout=30)
    # One thread (the pool process's, or the worker's own), one loop, made once.
    assert (second["pid"], second["thread"], second["loop"]) == (
        first["pid"],
        first["thread"],
        first["loop"],
    )
    assert second["probes"] == first["probes"] + 1
    if pool == "solo":
        assert first["pid"] == pools["solo"].proc.pid  # the worker's main process itself


def test_the_threads_pool_runs_each_body_on_its_own_thread_s_loop(app, pools, key):
    """Two probes held together need both threads; a second pair finds each thread's
    loop again, one probe further on."""
    pairs = []
    for n in range(2):
        handles = [probe(app, "threads", f"{key}-{n}", party=2) for _ in range(2)]
        pairs.append({(seen := h.get(timeout=30))["thread"]: seen for h in handles})
    first, second = pairs
    assert len(first) == 2 and set(second) == set(first)  # both threads, both times
    assert len({seen["loop"] for seen in first.values()}) == 2  # a loop per thread
    for thread, seen in first.items():
        assert second[thread]["loop"] == seen["loop"]
        assert second[thread]["probes"] == seen["probes"] + 1
    assert {seen["pid"] for seen in [*first.values(), *second.values()]} == {
        pools["threads"].proc.pid
    }


def test_a_soft_time_limit_ends_an_async_run_as_a_plain_one_s_and_keeps_the_loop(
    app, pools, key, rds
):
    """billiard raises SoftTimeLimitExceeded from a signal handler in the pool process's
    main thread, the async body's loop's: while the loop waits in its selector, or while
    it runs a plain callback (whose runner in asyncio would catch and log it). Either way
    the run fails as the plain one does (its only attempt, its step run once), and the
    process's loop serves the next delivery."""
    before = probe(app, "prefork", f"{key}-before").get(timeout=30)
    failures = {}
    for workflow, step in (
        (app.sync_soft_overruns, "sleep"),
        (app.async_soft_overruns, "sleep"),
        (app.async_soft_overruns_busy, "busy"),
    ):
        run_key = f"{key}-{workflow.__name__}"
        handle = workflow.apply_async(args=(run_key,), queue=QUEUES["prefork"])
        with pytest.raises(WorkflowFailed) as failed:
            handle.get(timeout=30)
        record = handle.record()
        failures[workflow.__name__] = (
            failed.value.error_type,
            record.status,
            record.attempts,
            effects(rds, run_key, step),
        )
    plain = failures.pop("sync_soft_overruns")
    assert plain == ("billiard.exceptions.SoftTimeLimitExceeded", "FAILED", 1, 1)
    assert failures == {"async_soft_overruns": plain, "async_soft_overruns_busy": plain}
    after = probe(app, "prefork", f"{key}-after").get(timeout=30)
    assert (after["pid"], after["loop"]) == (before["pid"], before["loop"])
    assert after["probes"] == before["probes"] + 1


def test_a_hard_time_limit_still_uses_up_an_async_run_s_attempt(app, pools, key, rds):
    """As for a plain body (test_recovery): billiard SIGTERMs the overrunning pool
    process, as a cold shutdown does, but this one is the run's failure."""
    before = probe(app, "prefork", f"{key}-before").get(timeout=30)
    handle = app.async_overruns.apply_async(args=(key,), queue=QUEUES["prefork"])
    with pytest.raises(WorkflowFailed):
        handle.get(timeout=60)
    log = pools["prefork"].log()
    assert "Hard time limit (4" in log
    assert f"run {handle.id} interrupted" not in log
    assert (handle.record().attempts, effects(rds, key, "sleep")) == (1, 1)
    # The process that overran is gone; the one in its place makes a loop of its own.
    after = probe(app, "prefork", f"{key}-after").get(timeout=30)
    assert after["pid"] != before["pid"] and after["probes"] == 1


def test_revoke_with_terminate_cancels_an_async_run_without_calling_it_a_failure(
    app, pools, key, rds
):
    rds.set(f"block:{key}:s1", "1")
    handle = app.async_five_steps.apply_async(args=(key,), queue=QUEUES["prefork"])
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    app.app.control.revoke(handle.id, terminate=True)
    wait_until(
        lambda: handle.status() is WorkflowStatus.CANCELLED,
        30,
        message="the revoke to cancel the run",
    )
    rds.delete(f"block:{key}:s1")
    with pytest.raises(WorkflowCancelled, match="revoked"):
        handle.get(timeout=5)
    log = pools["prefork"].log()
    assert f"run {handle.id} interrupted by a terminate signal" in log
    assert f"run {handle.id} failed" not in log
    assert effects(rds, key, "s2") == 0


def test_a_warm_shutdown_lets_the_running_async_workflow_finish(start_worker, app, key, rds):
    rds.set(f"block:{key}:s2", "1")
    worker = start_worker("warm", app=APP)
    handle = app.async_five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s2"), 30, message="step 2 to start")
    worker.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "Warm shutdown" in worker.log(), 30, message="warm shutdown")
    rds.delete(f"block:{key}:s2")
    assert worker.wait_exit(30) == 0
    assert handle.status() is WorkflowStatus.SUCCEEDED
    assert handle.record().owner is None
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1] * 5


def test_a_cold_shutdown_gives_an_async_run_back_without_using_its_only_attempt(
    start_worker, app, key, rds
):
    """As for a plain body (test_recovery): the SIGTERM a cold shutdown sends the pool
    process, raised while the loop waits, gives the lease back and the attempt too."""
    rds.set(f"block:{key}:s2", "1")
    worker = start_worker("cold", app=APP)
    handle = app.async_one_attempt.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s2"), 30, message="step 2 to start")
    worker.proc.send_signal(signal.SIGQUIT)  # cold shutdown: running tasks are stopped
    worker.wait_exit(30)
    record = handle.record()
    assert (record.status, record.attempts, record.recoveries, record.error) == (
        "PENDING",
        0,
        0,
        None,
    ), record
    assert record.owner is None  # released, not left to a lease timeout
    assert f"run {handle.id} interrupted by a terminate signal" in worker.log()
    assert f"run {handle.id} failed" not in worker.log()
    rds.delete(f"block:{key}:s2")
    start_worker("after-cold", app=APP)
    assert handle.get(timeout=60) == [10, 20, 30]
    assert (handle.record().attempts, handle.record().recoveries) == (1, 0)
    assert (effects(rds, key, "s1"), effects(rds, key, "s2")) == (1, 2)


def test_pool_processes_recycled_by_max_tasks_per_child_run_async_bodies_on_new_loops(
    start_worker, app, key
):
    """Each delivery in a fresh process, and so on a fresh loop; each run finishes without
    a recovery (none is left leased for the 30 s lease). One at a time: a run kept waiting
    for the next process would be dispatched again, and the copy takes a process too."""
    worker = start_worker(
        "recycled", app=APP, env=LONG_LEASE, concurrency=1, extra=("--max-tasks-per-child=1",)
    )
    seen = []
    for n in range(2):
        handle = app.probe.delay(f"{key}-{n}")
        seen.append(handle.get(timeout=60))
        assert handle.record().recoveries == 0
    assert seen[0]["pid"] != seen[1]["pid"]
    assert [s["probes"] for s in seen] == [1, 1]
    assert worker.proc.poll() is None


def test_a_gevent_worker_refuses_an_app_with_async_workflows_at_start(basic_app):
    worker = Worker(APP, {}, queues=unique("aq-gevent-"), name=unique("gevent-"), pool="gevent")
    try:
        assert worker.wait_exit(60) != 0
        log = worker.log()
    finally:
        worker.kill()
    assert "the gevent pool (-P gevent) can't run async workflows" in log
    assert "tests.apps.async_pools.probe" in log and "tests.apps.basic.gathers" in log
    assert "-P prefork, -P threads or -P solo" in log
    assert " ready." not in log  # refused before it took a message


def test_a_gevent_worker_still_runs_an_app_without_async_workflows(basic_app):
    from tests.apps import other

    worker = Worker(
        "tests.apps.other", {}, queues=OTHER_QUEUE, name=unique("gevent-"), pool="gevent"
    )
    try:
        worker.wait_ready()
        assert other.greet.delay("gevent").get(timeout=30) == "hello gevent"
    finally:
        worker.kill()
