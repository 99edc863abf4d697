"""Items routed to a queue that no worker consumes: their messages wait there, as any
Celery task's would; the sweeper names the queue in a warning and publishes no copies;
``durable show`` says which items wait in which queue, and that nobody consumes it."""

from __future__ import annotations

import json

from celery_durable import WorkflowStatus
from tests.conftest import GPU_QUEUE
from tests.support.cli import celery
from tests.support.services import BROKER_URL, effects, queue_length
from tests.support.waiting import wait_until


def dispatches(basic_app, run_id: str) -> list[int]:  # type: ignore[no-untyped-def]
    return [row.dispatches for row in basic_app.durable.runtime.store.fanout.list_items(run_id)]


def test_items_on_an_unconsumed_queue_wait_there_visibly_without_copies(
    basic_app, start_worker, key, rds
):
    # Nobody consumes GPU_QUEUE yet. The shortest dispatch grace brings the sweeps that
    # would re-dispatch the items (after 1, 2, 4 s) sooner.
    default = start_worker("default", env={"CELERY_DURABLE_DISPATCH_GRACE": "1"})
    handle = basic_app.rendered.delay(key, 3)
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 60, message="the map to wait")
    warning = f"no worker consumes queue {GPU_QUEUE!r}: 3 item(s)"
    wait_until(
        lambda: warning in default.log(),
        60,
        message=lambda: f"the sweeper's warning:\n{default.log()[-3000:]}",
    )
    # Two more rounds of the sweeper's re-dispatch backoff come due meanwhile: not one copy
    # is published.
    wait_until(lambda: min(dispatches(basic_app, handle.id)) >= 4, 60, 0.2, "3 sweeps")
    assert queue_length(BROKER_URL, GPU_QUEUE) == 3
    # At most once a minute per queue, not once per sweep.
    assert default.log().count(warning) == 1

    shown = celery("durable", "show", handle.id)
    assert shown.returncode == 0, shown.stderr
    assert (
        f"3 item(s) published to queue {GPU_QUEUE!r}, not started; no worker consumes "
        f"{GPU_QUEUE!r}: start one (celery worker -Q {GPU_QUEUE})"
    ) in shown.stdout, shown.stdout
    assert f"item 2: pending, not started (published to queue {GPU_QUEUE!r})" in shown.stdout
    listed = json.loads(celery("durable", "show", handle.id, "--json").stdout)
    assert listed["unconsumed_queues"] == [GPU_QUEUE]
    assert [(i["item"], i["status"], i["queue"], i["not_started"]) for i in listed["items"]] == [
        (n, "pending", GPU_QUEUE, True) for n in range(3)
    ]

    gpu = start_worker("gpu", queues=GPU_QUEUE)
    assert handle.get(timeout=60) == ["page-0", "page-1", "page-2"]
    assert [effects(rds, key, f"render{n}") for n in range(3)] == [1, 1, 1]
    assert "not claimed" not in gpu.log()  # no copies to acknowledge
    shown = celery("durable", "show", handle.id)
    assert "not started" not in shown.stdout and "3 item(s): ok 3" in shown.stdout
