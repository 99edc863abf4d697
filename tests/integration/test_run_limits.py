"""What one run may grow to: durable_max_steps, durable_max_child_depth and
durable_max_map_items. A run past one fails at once (a PermanentError, never retried,
never left RUNNING) with RunLimitExceeded naming the setting and the run, and nothing
over the limit is stored. In eager mode on the session's Postgres tables (the whole
delivery path in-process), and a real worker for the step limit, on both brokers."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from celery.result import allow_join_result

import celery_durable as cd
from celery_durable import Durable
from celery_durable.core.config import DurableConfig
from tests.support.eager import eager_durable, failure_of

LIMIT_ERROR = "celery_durable.errors.RunLimitExceeded"


def test_the_limits_have_defaults_and_are_read_like_the_other_settings():
    config = DurableConfig.from_sources(environ={})
    assert (config.max_steps, config.max_child_depth, config.max_map_items) == (
        10_000,
        32,
        100_000,
    )
    env = {"CELERY_DURABLE_MAX_STEPS": "500", "CELERY_DURABLE_MAX_MAP_ITEMS": "20"}
    read = DurableConfig.from_sources(app_conf={"durable_max_child_depth": 3}, environ=env)
    assert (read.max_steps, read.max_child_depth, read.max_map_items) == (500, 3, 20)
    with pytest.raises(cd.ConfigurationError, match="durable_max_steps"):
        DurableConfig.from_sources({"max_steps": "many"}, environ={})
    with pytest.raises(cd.ConfigurationError, match="durable_max_child_depth=0"):
        DurableConfig.from_sources({"max_child_depth": 0}, environ={}).validate()


@pytest.fixture
def bounded(basic_app) -> Iterator[Durable]:
    """A Durable running workflows in-process (eager) with small limits."""
    prefix = basic_app.durable.config.table_prefix
    limits = {"max_steps": 20, "max_child_depth": 2, "max_map_items": 5}
    with eager_durable("limits", prefix, max_pending_signals=10, **limits) as durable:
        yield durable


def rows(durable: Durable, table: str, run_id: str) -> list[Any]:
    store = durable.runtime.store
    found = getattr(store.tables, table)
    column = found.c.id if table == "runs" else found.c.run_id
    query = sa.select(found).where(found.c.namespace == store.namespace, column == run_id)
    with store.engine.connect() as conn:
        return list(conn.execute(query).all())


def test_a_looping_run_fails_at_max_steps_naming_continue_as_new(bounded):
    """Bug: a looping run recorded steps without end (76,719 in 43 s)."""

    @bounded.step(name="l.tick")
    def tick(i: int) -> int:
        return i

    @bounded.workflow(name="l.loop", max_attempts=3)
    def loop() -> None:
        for i in itertools.count():
            tick(i)

    @bounded.workflow(name="l.swallow", max_attempts=3)
    def swallow() -> str:
        for i in itertools.count():
            try:
                tick(i)
            except cd.RunLimitExceeded:
                if i > 40:
                    return "caught it"
        return "never"

    for workflow in (loop, swallow):
        handle = workflow.delay()
        failed = failure_of(handle)
        assert failed.error_type == LIMIT_ERROR, failed
        message = failed.error_message
        assert "durable_max_steps=20" in message and repr(handle.id) in message, message
        assert "continue_as_new" in message, message
        record = handle.record()
        assert (record.status, record.attempts) == ("FAILED", 1)  # permanent: not retried
        assert len(rows(bounded, "steps", handle.id)) == 20  # step 20 was never stored


def test_continue_as_new_keeps_a_long_loop_under_max_steps(bounded):
    @bounded.step(name="l.add")
    def add(i: int) -> int:
        return i + 1

    @bounded.workflow(name="l.generations")
    def generations(total: int, done: int = 0) -> int:
        for _ in range(10):
            done = add(done)
        if done < total:
            cd.continue_as_new(total, done)
        return done

    assert generations.delay(50).get(timeout=30) == 50  # 50 steps, 10 a generation


def test_a_saga_at_max_steps_still_rolls_back(bounded):
    undone: list[int] = []

    def undo(i: int, result: int) -> None:
        undone.append(result)

    @bounded.step(name="l.reserve", compensate=undo)
    def reserve(i: int) -> int:
        return i

    @bounded.workflow(name="l.saga")
    def saga() -> None:
        for i in itertools.count():
            reserve(i)

    handle = saga.delay()
    assert failure_of(handle).error_type == LIMIT_ERROR
    assert undone == list(reversed(range(20)))  # every compensation ran, past the limit
    assert handle.record().compensation == "compensated"


def test_a_map_over_max_map_items_fails_before_any_item_is_stored(bounded):
    @bounded.step(name="l.double")
    def double(i: int) -> int:
        return 2 * i

    @bounded.workflow(name="l.map")
    def mapped(count: int | None) -> list[int]:
        items = itertools.count() if count is None else range(count)
        return cd.map(double, items)

    assert mapped.delay(5).get(timeout=30) == [0, 2, 4, 6, 8]  # at the limit: fine
    for count in (6, None):  # None: an endless iterator, refused without exhausting it
        handle = mapped.delay(count)
        failed = failure_of(handle)
        assert failed.error_type == LIMIT_ERROR, failed
        assert "durable_max_map_items=5" in failed.error_message, failed
        assert repr(handle.id) in failed.error_message and "l.double" in failed.error_message
        assert handle.record().attempts == 1
        assert rows(bounded, "items", handle.id) == [] and rows(bounded, "steps", handle.id) == []


def test_children_nested_past_max_child_depth_fail_the_run_that_asks(bounded):
    @bounded.workflow(name="l.nest")
    def nest(levels: int) -> int:
        if levels == 0:
            return 0
        return 1 + nest.start_child(levels - 1).result()  # type: ignore[no-any-return]

    assert nest.delay(2).get(timeout=30) == 2  # a child (depth 1) and its child (depth 2)
    handle = nest.delay(3)
    with pytest.raises(cd.WorkflowFailed) as failed:
        handle.get(timeout=30)
    # The run at depth 2 asked for a third level: it failed, and so did its parents.
    grandchild = f"{handle.id}:0:0"
    refused = failure_of(bounded.get_handle(grandchild))
    assert refused.error_type == LIMIT_ERROR, refused
    assert "durable_max_child_depth=2" in refused.error_message, refused
    assert repr(grandchild) in refused.error_message and "3 deep" in refused.error_message
    assert rows(bounded, "runs", f"{grandchild}:0") == []  # the fourth level was never stored
    assert "RunLimitExceeded" in failed.value.error_message  # the top run says why
    for run_id in (handle.id, f"{handle.id}:0", grandchild):
        assert bounded.get_handle(run_id).record().status == "FAILED"


def test_gc_deletes_signals_whose_run_does_not_exist(bounded):
    """Bug: signals kept for runs that never existed stayed forever; `durable gc` (and
    Durable.gc, which it calls) deleted only the signals of the runs it deleted."""
    signals = bounded.runtime.store.tables.signals
    orphan = {
        "namespace": bounded.runtime.store.namespace,
        "name": "go",
        "payload": "1",
        "error": "x",
    }
    with bounded.runtime.store.engine.begin() as conn:
        conn.execute(
            sa.insert(signals),
            [{**orphan, "run_id": f"ghost-{i}", "created_at": 1000.0} for i in range(3)],
        )
    assert bounded.gc("1s", dry_run=True).signals == 3
    assert bounded.gc("1s").signals == 3
    with bounded.runtime.store.engine.connect() as conn:
        left = conn.execute(
            sa.select(signals.c.id).where(signals.c.namespace == bounded.runtime.store.namespace)
        ).all()
    assert left == []


def test_a_worker_fails_a_run_at_its_max_steps_and_stays_up(basic_app, start_worker, key):
    """A real worker (its own namespace and queue, durable_max_steps=3) runs a five-step
    workflow started by name: the run fails at its fourth step with the error naming the
    setting, the run and continue_as_new, three steps stored, never left RUNNING."""
    from celery_durable.store import Store
    from tests.support.services import unique
    from tests.support.waiting import wait_until

    namespace, queue = unique("ns-steps-"), unique("q-steps-")
    env = {"CELERY_DURABLE_MAX_STEPS": "3", "CELERY_DURABLE_NAMESPACE": namespace}
    worker = start_worker("steps", env=env, queues=queue)
    config = basic_app.durable.config
    store = Store(config.database_url, config.table_prefix, namespace)
    try:
        run_id = f"steps-{key}"
        basic_app.app.send_task(basic_app.five_steps.name, args=[key], queue=queue, task_id=run_id)
        run = wait_until(
            lambda: (found := store.get_run(run_id)) and found.status == "FAILED" and found,
            60,
            message="the run to fail at its step limit",
        )
        assert "RunLimitExceeded" in run.error and "durable_max_steps=3" in run.error
        assert repr(run_id) in run.error and "continue_as_new" in run.error
        assert run.attempts == 1  # permanent: not retried
        assert sorted(store.load_steps(run_id)) == [0, 1, 2]
        assert worker.proc.poll() is None  # the worker is still up
    finally:
        store.dispose()


def test_signals_sent_at_once_keep_to_the_cap_of_pending_and_refused_ones(bounded):
    """Bug: with a cap of 100 pending signals, 300 sent at once all landed in the signals
    table: the pending ones under the cap, every refused one kept beside them."""

    @bounded.workflow(name="l.waits")
    def waits() -> Any:
        return cd.wait_for_signal("never", timeout=600)

    handle = waits.delay()
    start = threading.Barrier(6)

    def send(sender: int) -> None:
        start.wait()
        for i in range(25):
            bounded.send_signal(handle.id, "go", i, idempotency_key=f"{sender}-{i}")

    threads = [threading.Thread(target=send, args=(n,)) for n in range(6)]
    # In eager mode each send's wake-up is applied inside Celery's denied_join_result(),
    # which saves and restores a process-wide flag: threads interleaved can leave it set,
    # and every later .get() in this process refuses ("Never call result.get() within a
    # task!"). allow_join_result() restores it once they are done.
    with allow_join_result():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    kept = rows(bounded, "signals", handle.id)
    assert len([r for r in kept if r.consumed_at is None]) == 10  # durable_max_pending_signals
    refused = [r for r in kept if r.error is not None]
    assert len(refused) == 10 and all("PendingSignalsFull" in r.error for r in refused)
