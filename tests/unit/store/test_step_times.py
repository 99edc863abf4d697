"""When each step began and in which attempt of its run, on both databases (migration 0006).

``started_at`` is the database's clock minus the time since the step began, taken at the
write: a deferred step's record, written seconds after the step ran, still says when it
ran (its ``created_at`` is the write's). A wait or a fan-out step keeps when and in which
attempt it began; a failed step that runs again takes the new attempt's.
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from celery_durable.ops import run_details
from celery_durable.ops.dashboard.pages import step_when
from celery_durable.store import Outcome, StepRecord, Store
from celery_durable.store.migrations import current, upgrade
from celery_durable.store.reads import CurrentStep, current_steps
from tests.support.builders import claimed, fan, started
from tests.support.services import PG_URL, drop_tables, unique
from tests.support.waiting import wait_until

SLACK = 1.0  # seconds of the write's own latency the assertions allow


def ok(idx: int, took: float, ago: float) -> StepRecord:
    """A step that began ``ago`` seconds back and took ``took``."""
    return StepRecord(idx, "s", "ok", "[[],{}]", "1", None, took, began=time.monotonic() - ago)


def created_at(store: Store, run_id: str) -> dict[int, float]:
    steps = store.tables.steps
    query = sa.select(steps.c.idx, steps.c.created_at).where(steps.c.run_id == run_id)
    with store.engine.connect() as conn:
        return {idx: created for idx, created in conn.execute(query)}


def later_than(store: Store, moment: float) -> None:
    """Wait until the database's clock has passed ``moment`` by a little."""
    wait_until(lambda: store.now() > moment + 0.05, 5, message="the database clock to move")


def test_a_deferred_record_written_later_says_when_the_step_ran(store):
    fence = claimed(store, "t1", grace=0)
    deferred = ok(0, 0.5, ago=5.0)  # ran 5 s ago, its record buffered since
    strict = ok(1, 0.2, ago=0.2)
    before = store.now()
    written = store.record_step("t1", fence, strict, carried=[deferred])
    assert written.outcome is Outcome.RECORDED
    after = store.now()
    steps = store.load_steps("t1")
    first, second = steps[0], steps[1]
    assert first.attempt == second.attempt == 1
    # Written together: created_at (less the duration) would say it ran a moment ago.
    created = created_at(store, "t1")
    assert abs(created[0] - created[1]) < SLACK
    assert before - 5.0 - SLACK < first.started_at < after - 5.0 + SLACK
    assert before - 0.2 - SLACK < second.started_at < after - 0.2 + SLACK
    assert first.started_at + first.duration < second.started_at  # it ended before


def test_the_settle_carries_deferred_records_that_say_when_they_ran(store):
    fence = claimed(store, "t9", grace=0)
    carried = [ok(0, 0.5, ago=5.0), ok(1, 0.1, ago=1.0)]
    before = store.now()
    assert store.settle_run("t9", fence, "SUCCEEDED", result="2", carried=carried)
    after = store.now()
    steps = store.load_steps("t9")
    assert [steps[i].attempt for i in (0, 1)] == [1, 1]
    assert before - 5.0 - SLACK < steps[0].started_at < after - 5.0 + SLACK
    assert before - 1.0 - SLACK < steps[1].started_at < after - 1.0 + SLACK
    assert [steps[i].output for i in (0, 1)] == ["1", "1"]


def test_a_wait_and_a_fanout_step_keep_when_and_in_which_attempt_they_began(store):
    fence = claimed(store, "t2", grace=0)
    assert (
        store.fanout.insert_fanout("t2", fence, started(0, 2), fan(2)).outcome is Outcome.RECORDED
    )
    waiting = StepRecord(1, "sleep", "waiting", "[[],{}]", "{}", None)
    assert store.record_step("t2", fence, waiting).outcome is Outcome.RECORDED
    began = store.load_steps("t2")
    assert began[0].attempt == began[1].attempt == 1
    # The attempt fails for another reason; the next one finishes both steps.
    assert store.schedule_retry("t2", fence, 0.0, '{"type": "x"}') == "PENDING"
    later_than(store, max(began[0].started_at, began[1].started_at))
    claim = wait_until(lambda: store.claim_run("t2", "me", lease=30), 5)
    assert claim.attempts == 2
    for idx in (0, 1):
        done = StepRecord(idx, began[idx].name, "ok", began[idx].input, "[]", None, 0.0)
        assert store.record_step("t2", claim.fence, done).outcome is Outcome.RECORDED
    steps = store.load_steps("t2")
    assert [steps[i].status for i in (0, 1)] == ["ok", "ok"]
    assert [(steps[i].started_at, steps[i].attempt) for i in (0, 1)] == [
        (began[i].started_at, 1) for i in (0, 1)
    ]
    created = created_at(store, "t2")
    assert all(created[i] > began[i].started_at for i in (0, 1))  # rewritten, start kept


def test_a_failed_step_that_runs_again_takes_the_new_attempt(store):
    fence = claimed(store, "t3", grace=0)
    failed = StepRecord(
        0, "s", "retry", "[[],{}]", None, '{"type": "x"}', 0.1, began=time.monotonic()
    )
    assert store.schedule_retry("t3", fence, 0.0, '{"type": "x"}', failed) == "PENDING"
    first = store.load_steps("t3")[0]
    assert (first.status, first.attempt) == ("retry", 1)
    later_than(store, first.started_at)
    claim = wait_until(lambda: store.claim_run("t3", "me", lease=30), 5)
    assert store.record_step("t3", claim.fence, ok(0, 0.0, 0.0)).outcome is Outcome.RECORDED
    again = store.load_steps("t3")[0]
    assert (again.status, again.attempt) == ("ok", 2)
    assert again.started_at > first.started_at


def test_the_engine_records_when_strict_deferred_and_retried_steps_began(durable):
    tries: list[float] = []

    @durable.step(commit="deferred")
    def price(n: int) -> int:
        return n * 2

    @durable.step(max_attempts=3, backoff=0.1)
    def flaky() -> str:
        tries.append(durable.runtime.store.now())
        if len(tries) < 3:
            raise ConnectionError("try again")
        return "ok"

    @durable.step
    def slow() -> str:
        time.sleep(0.5)  # the step's own work: the deferred record waits for its write
        return "done"

    @durable.workflow
    def flow() -> list:
        return [price(1), slow(), flaky()]

    handle = flow.delay()
    assert handle.get(timeout=10) == [2, "done", "ok"]
    run = durable.runtime.store.get_run(handle.id)
    steps = durable.runtime.store.load_steps(handle.id)
    created = created_at(durable.runtime.store, handle.id)
    deferred, strict, retried = steps[0], steps[1], steps[2]
    assert [s.attempt for s in (deferred, strict, retried)] == [1, 1, 1]
    assert run.started_at - SLACK < deferred.started_at <= strict.started_at
    # The deferred record rode on slow's write, half a second after price ran.
    assert abs(created[0] - created[1]) < 0.1
    assert created[0] - deferred.started_at >= 0.5
    assert abs(strict.started_at + strict.duration - created[1]) < 0.1
    # The retried step began at its first try; its duration covers the three.
    close = 0.05  # the clock reads themselves
    assert retried.started_at - close <= tries[0] < tries[2]
    assert tries[2] <= retried.started_at + retried.duration + close
    assert retried.duration >= 0.3  # backoffs of 0.1 and 0.2


def test_current_steps_are_the_last_recorded_step_of_each_run(store):
    fence = claimed(store, "t4", grace=0)
    for idx in range(3):
        assert store.record_step("t4", fence, ok(idx, 0.0, 0.0)).outcome is Outcome.RECORDED
    claimed(store, "t5", grace=0)  # no step yet
    current = current_steps(store, ["t4", "t5", "missing"])
    assert current == {"t4": CurrentStep("t4", 2, "s", "ok")}
    assert current_steps(store, []) == {}


@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_steps_recorded_before_0006_say_nothing_of_start_or_attempt(database, tmp_path):
    prefix = unique("m")[:9] + "_"
    url = PG_URL if database == "postgresql" else f"sqlite:///{tmp_path}/old.sqlite3"
    store = Store(url, prefix, "ns")
    try:
        upgrade(store, "0005")
        steps = sa.Table(f"{prefix}steps", sa.MetaData(), autoload_with=store.engine)
        assert "started_at" not in steps.c and "attempt" not in steps.c
        row = {"namespace": "ns", "run_id": "old", "idx": 0, "name": "s", "status": "ok"}
        with store.engine.begin() as conn:
            conn.execute(
                sa.insert(steps).values(
                    **row, input="[]", output="1", created_at=1.8e9, duration=0.5
                )
            )
        upgrade(store)
        assert current(store) == "0015"
        old = store.load_steps("old")[0]
        assert (old.output, old.duration, old.started_at, old.attempt) == ("1", 0.5, None, None)
        assert run_details.step_times(old) == "0.50s"  # what `durable show` prints of it
        assert step_when(old, 1.8e9) == ""  # and the run page: nothing
    finally:
        store.dispose()
        if database == "postgresql":
            drop_tables(PG_URL, prefix)
