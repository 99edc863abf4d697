"""What Flower shows of a workflow's canvas: the chain's callback is an ordinary task,
linked to the run that fired it (``parent_id``) and to the chain's first task
(``root_id``), as Celery links them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import chain

from tests.support.flower import Flower
from tests.support.services import unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker


@pytest.fixture(scope="module")
def flower(canvas_app: Any) -> Iterator[Flower]:
    worker = Worker(
        "tests.apps.canvas", {}, queues=canvas_app.QUEUE, name=unique("cev"), extra=("-E",)
    ).wait_ready()
    process = Flower("tests.apps.canvas").wait_ready()
    try:
        yield process.capturing(lambda: canvas_app.tagged.delay(1, unique("probe")))
    finally:
        process.stop()
        worker.kill()


def test_flower_links_a_chain_s_callback_to_the_run_that_fired_it(canvas_app, flower, key):
    canvas = canvas_app
    result = chain(canvas.add.s(1, 2), canvas.tagged.s(key), canvas.record.s(key)).apply_async()
    assert result.get(timeout=60) == {"value": 6, "tag": key}
    run_id, first_id = result.parent.id, result.parent.parent.id
    shown = wait_until(
        lambda: (info := flower.task(result.id)) and info.get("state") == "SUCCESS" and info, 30
    )
    assert (shown["name"], shown["parent_id"], shown["root_id"]) == (
        canvas.record.name,
        run_id,
        first_id,
    )
    run = wait_until(
        lambda: (info := flower.task(run_id)) and info.get("state") == "SUCCESS" and info, 30
    )
    assert (run["parent_id"], run["root_id"]) == (first_id, first_id)
