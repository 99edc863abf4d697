"""Composition end to end: parallel steps, routed steps and children on real prefork
workers, the session's broker and Postgres.

Two kinds of worker, one of each for the whole module: one consumes the session's default
queue, one only the routed steps' queue (GPU_QUEUE, unique per session). Side effects are
counted in Redis. Tests that kill a worker or need one missing are in
test_composition_workers.py.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from celery_durable import WorkflowFailed, WorkflowStatus
from tests.conftest import GPU_QUEUE
from tests.support.builders import item_rows
from tests.support.cli import celery
from tests.support.services import effects
from tests.support.waiting import wait_until


def test_a_map_of_50_routed_items_completes_in_order(
    basic_app, shared_worker, shared_gpu_worker, key, rds
):
    handle = basic_app.rendered.delay(key, 50)
    assert handle.get(timeout=120) == [f"page-{n}" for n in range(50)]
    assert [effects(rds, key, f"render{n}") for n in range(50)] == [1] * 50
    # Ordinary Celery tasks under the step's own name (what Flower shows), on the gpu
    # worker only, with task ids derived from the run id, step index and item number.
    assert f"Task {basic_app.render.name}[{handle.id}:0:49] received" in shared_gpu_worker.log()
    task = basic_app.app.tasks[basic_app.render.name]
    assert task.acks_late and task.reject_on_worker_lost
    rows = item_rows(basic_app, handle.id)
    assert [(r.idx, r.item, r.status) for r in rows] == [(0, n, "ok") for n in range(50)]
    steps = basic_app.durable.runtime.store.load_steps(handle.id)
    assert list(steps) == [0] and steps[0].status == "ok"  # one step index for the fan-out
    # It began when it was dispatched, with its items, in the attempt that dispatched it,
    # although the parent recorded its outcome later (after suspending on its items).
    items = basic_app.durable.runtime.store.tables.items
    with basic_app.durable.runtime.store.engine.connect() as conn:
        created, finished = conn.execute(
            sa.select(sa.func.min(items.c.created_at), sa.func.max(items.c.finished_at)).where(
                items.c.run_id == handle.id
            )
        ).one()
    assert steps[0].attempt == 1
    assert abs(steps[0].started_at - created) < 0.5 and steps[0].started_at < finished


def test_futures_gather_and_a_routed_call(basic_app, shared_worker, shared_gpu_worker, key, rds):
    handle = basic_app.report.delay(key)
    assert handle.get(timeout=60) == {
        "a": {"source": "a"},
        "b": {"source": "b"},
        "cover": "page-0",
        "images": ["page-1", "page-2", "page-3"],
    }
    assert effects(rds, key, "fetch-a") == effects(rds, key, "fetch-b") == 1
    names = [s.name for s in basic_app.durable.runtime.store.load_steps(handle.id).values()]
    assert names == [basic_app.fetch.name] * 2 + [basic_app.render.name] * 2


@pytest.mark.parametrize("return_exceptions", [False, True])
def test_failed_items_raise_step_failed_or_come_back_in_place(
    basic_app, shared_worker, key, rds, return_exceptions
):
    handle = basic_app.picky_map.delay(key, 8, return_exceptions)
    if return_exceptions:
        assert handle.get(timeout=60) == [
            0,
            1,
            2,
            {"type": "builtins.ValueError", "item": 3, "step": basic_app.picky.name},
            4,
            5,
            6,
            {"type": "builtins.ValueError", "item": 7, "step": basic_app.picky.name},
        ]
    else:
        with pytest.raises(WorkflowFailed) as failed:
            handle.get(timeout=60)
        assert failed.value.error_type == "celery_durable.errors.StepFailed"
        assert "(item 3) failed: builtins.ValueError: item 3 refused" in failed.value.error_message
        assert "raise ValueError" in failed.value.error_traceback  # the item's own traceback
        # The body ran twice (dispatch, then replay once woken), on one attempt: a
        # recorded failure replays identically, so the workflow does not retry.
        assert effects(rds, key, "body") == 2 and handle.record().attempts == 1
    # Every item settled first; the failing ones ran under the step's max_attempts (2).
    assert [effects(rds, key, f"picky{n}") for n in range(8)] == [1, 1, 1, 2, 1, 1, 1, 2]
    errors = [r for r in item_rows(basic_app, handle.id) if r.status == "error"]
    assert [(r.item, r.attempts) for r in errors] == [(3, 2), (7, 2)]


def test_a_failing_child_raises_workflow_failed_in_its_parent(basic_app, shared_worker, key, rds):
    handle = basic_app.parent_of_failing.apply_async(args=(key,), run_id=f"pf-{key}")
    assert handle.get(timeout=60) == {
        "child": f"pf-{key}:0",  # derived from the parent's id and step index
        "type": "builtins.RuntimeError",
        "message": f"child of {key} failed",
    }
    child = basic_app.durable.get_handle(f"pf-{key}:0")
    assert child.status() is WorkflowStatus.FAILED and child.record().parent_id == handle.id
    unhandled = basic_app.unhandled_child_failure.delay(key)
    with pytest.raises(WorkflowFailed) as failed:
        unhandled.get(timeout=60)
    assert failed.value.error_type == "celery_durable.errors.WorkflowFailed"
    assert f"child of {key} failed" in failed.value.error_message


def test_a_detached_child_survives_its_parent(basic_app, shared_worker, key):
    handle = basic_app.parent_with_detached.apply_async(args=(key,), run_id=f"pd-{key}")
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 60, message="parent waits")
    child = basic_app.durable.get_handle(f"pd-{key}:0")
    wait_until(lambda: child.status() is WorkflowStatus.WAITING, 60, message="child waits")
    handle.cancel("parent only")
    assert child.status() is WorkflowStatus.WAITING
    child.signal("item", "still here")
    assert child.get(timeout=60) == ["still here"]


def test_a_duplicate_item_delivery_acks_without_running(
    basic_app, shared_worker, shared_gpu_worker, key, rds
):
    handle = basic_app.rendered.delay(key, 3)
    assert handle.get(timeout=60) == ["page-0", "page-1", "page-2"]
    # The same item's message again (same task id), as a broker redelivery would bring it.
    basic_app.durable.runtime.dispatch.publish_items(
        basic_app.render.name, GPU_QUEUE, handle.id, 0, [1]
    )
    wait_until(
        lambda: (
            f"item 1 of step 0 ({basic_app.render.name}) of run {handle.id} not claimed"
            in shared_gpu_worker.log()
        ),
        30,
        message=lambda: f"the duplicate to be acknowledged:\n{shared_gpu_worker.log()[-3000:]}",
    )
    assert effects(rds, key, "render1") == 1


def test_show_lists_items_and_children(basic_app, shared_worker, shared_gpu_worker, key):
    parent = basic_app.parent_of_failing.apply_async(args=(key,), run_id=f"ps-{key}")
    parent.get(timeout=60)
    shown = celery("durable", "show", parent.id)
    assert shown.returncode == 0, shown.stderr
    assert f"child ps-{key}:0: FAILED" in shown.stdout
    child = celery("durable", "show", f"ps-{key}:0")
    assert f"child of ps-{key} (its step 0)" in child.stdout
    mapped = basic_app.picky_map.delay(key, 5, True)
    mapped.get(timeout=60)
    listed = celery("durable", "show", mapped.id).stdout
    assert "5 item(s): error 1, ok 4" in listed
    assert "item 3: error (attempt 2)" in listed and "item 4: ok (attempt 1)" in listed


def test_items_tables_rows_are_sub_records_of_one_step(
    basic_app, shared_worker, shared_gpu_worker, key
):
    handle = basic_app.report.delay(key)
    handle.get(timeout=60)
    items = basic_app.durable.runtime.store.tables.items
    with basic_app.durable.runtime.store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(items.c.idx, sa.func.count())
            .where(items.c.run_id == handle.id)
            .group_by(items.c.idx)
            .order_by(items.c.idx)
        ).all()
    assert [tuple(r) for r in rows] == [(0, 1), (1, 1), (2, 1), (3, 3)]


def test_an_item_running_longer_than_its_lease_keeps_it(
    basic_app, shared_worker, shared_gpu_worker, key, rds
):
    """The worker's heartbeat renews item leases: a long item is never taken over."""
    rds.set(f"block:{key}:render", "1")
    handle = basic_app.rendered.delay(key, 1, 0)
    wait_until(lambda: rds.get(f"started:{key}:render"), 60, message="the item to start")
    items = basic_app.durable.runtime.store.tables.items
    store = basic_app.durable.runtime.store

    def lease_end() -> float:
        with store.engine.connect() as conn:
            return float(
                conn.execute(sa.select(items.c.due_at).where(items.c.run_id == handle.id)).scalar()
            )

    first = lease_end()
    # Past the first lease's end (lock timeout 3 s), and renewed meanwhile.
    wait_until(lambda: store.now() > first + 1 and lease_end() > first, 30, 0.2, "renewals")
    rds.delete(f"block:{key}:render")
    assert handle.get(timeout=60) == ["page-0"]
    assert effects(rds, key, "render0") == 1
