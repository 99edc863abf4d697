"""Canvases that survive killed workers: a chord whose header member's worker is SIGKILLed
mid-step, and a pool process SIGKILLed between a run's settle and its callback's publish."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from celery import chord

from celery_durable.core import faults as points
from tests.support.canvas import owed, seen
from tests.support.faults import arm, fired
from tests.support.services import BROKER_URL, delete_queues, unique
from tests.support.waiting import wait_until


@pytest.fixture
def queue(canvas_app: Any) -> Iterator[str]:
    """A queue of the test's own: only its workers serve it (it SIGKILLs them)."""
    name = unique("cr-")
    yield name
    delete_queues(BROKER_URL, [name])


def test_a_chord_callback_runs_once_with_every_result_after_a_header_worker_dies(
    canvas_app, start_worker, queue, rds, key
):
    canvas = canvas_app
    start_worker.together(*[{"name": "canvas", "app": "tests.apps.canvas", "queues": queue}] * 2)
    rds.set(f"hold:{key}:3", "1")
    header = [canvas.square.s(n, key).set(task_id=f"{key}-h{n}", queue=queue) for n in range(10)]
    result = chord(header, canvas.total.s(key).set(queue=queue)).apply_async()
    pid = int(wait_until(lambda: rds.get(f"pid:{key}:3"), 60, message="member 3's step"))
    os.killpg(os.getpgid(pid), signal.SIGKILL)  # member 3's whole worker, mid-step
    rds.delete(f"hold:{key}:3")
    assert result.get(timeout=120) == sum(n * n for n in range(10))
    assert int(rds.get(f"squares:{key}:3")) == 2  # the killed step ran again
    wait_until(lambda: not any(owed(canvas, f"{key}-h{n}") for n in range(10)), 60)
    [called] = seen(rds, key)  # once, every report cleared
    assert called["value"] == [n * n for n in range(10)]


def test_a_chord_completes_when_a_member_dies_between_its_stored_state_and_its_chord_part(
    canvas_app, start_worker, queue, rds, key
):
    canvas = canvas_app
    start_worker(name="canvas", app="tests.apps.canvas", queues=queue)
    arm(rds, f"{key}-m1", points.BEFORE_CHORD_PART, "kill")
    header = [canvas.square.s(n, key).set(task_id=f"{key}-m{n}", queue=queue) for n in range(3)]
    result = chord(header, canvas.total.s(key).set(queue=queue)).apply_async()
    assert result.get(timeout=90) == 0 + 1 + 4  # the sweeper recorded member 1's part
    assert fired(rds, f"{key}-m1", points.BEFORE_CHORD_PART)
    wait_until(lambda: not any(owed(canvas, f"{key}-m{n}") for n in range(3)), 60)
    [called] = seen(rds, key)
    assert called["value"] == [0, 1, 4]


def test_a_callback_is_published_once_when_the_worker_dies_after_the_settle(
    canvas_app, start_worker, queue, rds, key
):
    canvas = canvas_app
    start_worker(name="canvas", app="tests.apps.canvas", queues=queue)
    run_id = f"{key}-settled"
    arm(rds, run_id, points.BEFORE_REPORT, "kill")
    link = canvas.record.s(key).set(queue=queue)
    handle = canvas.tagged.apply_async((3, key), run_id=run_id, link=link, queue=queue)
    assert handle.get(timeout=60) == {"value": 6, "tag": key}
    wait_until(lambda: fired(rds, run_id, points.BEFORE_REPORT), 30, message="the kill")
    wait_until(lambda: seen(rds, key), 60, message="the callback, from the sweeper's report")
    wait_until(lambda: not owed(canvas, run_id), 60, message="the report cleared")
    [called] = seen(rds, key)
    assert called["value"] == {"value": 6, "tag": key} and called["parent_id"] == run_id
