"""Deferred steps (``commit="deferred"``) on real workers: their records ride on the run's
next write (a strict step, set_state, the settle), or go on their own at the buffer's
count or age bound; a SIGKILL loses only the unwritten ones, which run again."""

from __future__ import annotations

import pytest

from celery_durable.core import faults
from tests.support.faults import arm, fired
from tests.support.services import effects

APP = "tests.apps.deferred"


@pytest.fixture(scope="module")
def deferred_app(basic_app):  # type: ignore[no-untyped-def]
    from tests.apps import deferred

    return deferred


def run(deferred_app, rds, workflow, key, *args, fault=None):  # type: ignore[no-untyped-def]
    run_id = f"{workflow.__name__}-{key}"
    if fault is not None:
        arm(rds, run_id, *fault)
    handle = workflow.apply_async(args=(key, *args), run_id=run_id)
    result = handle.get(timeout=90)
    if fault is not None:
        assert fired(rds, run_id, fault[0])
    return handle, result


def test_deferred_records_ride_on_the_next_write(deferred_app, start_worker, key, rds):
    start_worker(app=APP)
    handle, result = run(deferred_app, rds, deferred_app.mixed, key)
    assert result == [0, 10, 20, 30, 40]
    steps = deferred_app.durable.runtime.store.load_steps(handle.id)
    assert [(i, s.status) for i, s in steps.items()] == [(i, "ok") for i in range(5)]
    assert [effects(rds, key, n) for n in ("d0", "d1", "s2", "d3", "d4")] == [1] * 5


@pytest.mark.parametrize(
    ("fault", "ran_twice"),
    [
        # Killed after strict step 2's commit: deferred 0 and 1 were in it.
        ((faults.AFTER_RECORD_STEP, "kill", 2), set()),
        # Killed with deferred 0 and 1 buffered: they run again, nothing else does.
        ((faults.AFTER_DEFER_STEP, "kill", 1), {"d0", "d1"}),
        # Deferred 3 went with set_state; deferred 4 was buffered for the settle.
        ((faults.AFTER_DEFER_STEP, "kill", 4), {"d4"}),
    ],
)
def test_a_sigkill_runs_again_only_the_unwritten_deferred_steps(
    deferred_app, start_worker, key, rds, fault, ran_twice
):
    start_worker(app=APP)
    _, result = run(deferred_app, rds, deferred_app.mixed, key, fault=fault)
    assert result == [0, 10, 20, 30, 40]
    counts = {n: effects(rds, key, n) for n in ("d0", "d1", "s2", "d3", "d4")}
    assert counts == {n: 2 if n in ran_twice else 1 for n in counts}


def test_the_buffer_writes_itself_at_its_count_bound(deferred_app, start_worker, key, rds):
    start_worker(app=APP, env={"CELERY_DURABLE_DEFERRED_MAX_STEPS": "3"})
    fault = (faults.AFTER_DEFER_STEP, "kill", 3)
    _, result = run(deferred_app, rds, deferred_app.all_deferred, key, 5, fault=fault)
    assert result == [0, 10, 20, 30, 40]
    # 0 to 2 were written when the buffer held 3; 3 was buffered at the kill.
    assert [effects(rds, key, f"d{n}") for n in range(5)] == [1, 1, 1, 2, 1]


def test_the_buffer_writes_itself_at_its_age_bound(deferred_app, start_worker, key, rds):
    start_worker(app=APP, env={"CELERY_DURABLE_DEFERRED_MAX_AGE": "0.3"})
    fault = (faults.AFTER_DEFER_STEP, "kill", 2)
    # Step 1 takes 0.5 s: once it is buffered, the oldest record is older than 0.3 s.
    _, result = run(deferred_app, rds, deferred_app.all_deferred, key, 4, 0.5, fault=fault)
    assert result == [0, 10, 20, 30]
    assert [effects(rds, key, f"d{n}") for n in range(4)] == [1, 1, 2, 1]
