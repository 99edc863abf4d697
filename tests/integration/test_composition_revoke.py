"""Revoking an item's task id (``celery control revoke <run id>:<step>:<item>``) settles
the item "revoked" in the store: its map fails it with TaskRevokedError (in place with
return_exceptions=True), the parent wakes as usual, and no later delivery of it runs,
on a worker that never heard of the revoke either (the test workers run without mingle).
"""

from __future__ import annotations

import pytest

from celery_durable import WorkflowFailed, WorkflowStatus
from celery_durable.engine.publish import item_task_id
from tests.conftest import GPU_QUEUE
from tests.support.cli import revoke_by_cli
from tests.support.services import effects
from tests.support.waiting import wait_until

REVOKED = "celery.exceptions.TaskRevokedError"


def item_status(basic_app, run_id: str, item: int) -> str | None:  # type: ignore[no-untyped-def]
    rows = basic_app.durable.runtime.store.fanout.list_items(run_id)
    return next((row.status for row in rows if row.item == item), None)


def not_claimed(basic_app, worker, run_id: str, item: int) -> None:  # type: ignore[no-untyped-def]
    """Wait until ``worker`` acknowledged a delivery of the item without running it."""
    line = f"item {item} of step 0 ({basic_app.render.name}) of run {run_id} not claimed"
    wait_until(
        lambda: line in worker.log(),
        30,
        message=lambda: f"{line!r} in the log:\n{worker.log()[-3000:]}",
    )


def test_revoking_a_pending_item_fails_it_in_place_and_it_never_runs(
    basic_app, start_worker, key, rds
):
    start_worker("default")  # no gpu worker yet: the items wait in their queue
    handle = basic_app.rendered_or_errors.delay(key, 4)
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 60, message="the map to wait")
    revoke_by_cli(item_task_id(handle.id, 0, 2))
    wait_until(lambda: item_status(basic_app, handle.id, 2) == "revoked", 30, message="revoked")
    gpu = start_worker("gpu", queues=GPU_QUEUE)  # started after the revoke, no mingle
    assert handle.get(timeout=60) == [
        "page-0",
        "page-1",
        {"type": REVOKED, "item": 2},
        "page-3",
    ]
    not_claimed(basic_app, gpu, handle.id, 2)  # its message arrived: acknowledged only
    assert [effects(rds, key, f"render{n}") for n in range(4)] == [1, 1, 0, 1]


@pytest.mark.parametrize("terminate", [False, True])
def test_revoking_a_running_item_fails_its_map_and_no_copy_runs_again(
    basic_app, start_worker, key, rds, terminate
):
    _, gpu = start_worker.together({"name": "default"}, {"name": "gpu-a", "queues": GPU_QUEUE})
    rds.set(f"block:{key}:render", "1")
    handle = basic_app.rendered.delay(key, 2, 1)  # item 1 blocks while the flag is set
    wait_until(lambda: rds.get(f"started:{key}:render"), 60, message="item 1 to start")
    basic_app.app.control.revoke(item_task_id(handle.id, 0, 1), terminate=terminate)
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=60)  # woken by the revoke: item 1 was the last one open
    assert failed.value.error_type == "celery_durable.errors.StepFailed"
    assert f"(item 1) failed: {REVOKED}: revoked (celery control revoke)" in (
        failed.value.error_message
    )
    rds.delete(f"block:{key}:render")
    if not terminate:  # it ran to its end, but the revoke was recorded first
        wait_until(
            lambda: "ran, but its outcome was not recorded" in gpu.log(),
            30,
            message=lambda: f"item 1 to end unrecorded:\n{gpu.log()[-3000:]}",
        )
    gpu.kill()
    # A copy of the item (a redelivery, a re-dispatch) on a worker that never heard of
    # the revoke: acknowledged without running.
    fresh = start_worker("gpu-b", queues=GPU_QUEUE)
    basic_app.durable.runtime.dispatch.publish_items(
        basic_app.render.name, GPU_QUEUE, handle.id, 0, [1]
    )
    not_claimed(basic_app, fresh, handle.id, 1)
    assert effects(rds, key, "render1") == 1
    assert item_status(basic_app, handle.id, 1) == "revoked"
