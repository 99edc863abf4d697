"""Deferred steps' records carried by the run's next write, on both databases: they commit
with it, in one transaction (one round trip on Postgres), and only while the writer holds
the run's lease; a refused write takes them down with it."""

from __future__ import annotations

import pytest

from celery_durable.store import Outcome, StepRecord, Store
from tests.support.builders import claimed, fan, started


def deferred(*idxs: int) -> list[StepRecord]:
    return [StepRecord(i, "d", "ok", "[[],{}]", str(i * 10), None, 0.0) for i in idxs]


def strict(idx: int) -> StepRecord:
    return StepRecord(idx, "s", "ok", "[[],{}]", "1", None, 0.0)


def recorded(store: Store, run_id: str) -> dict[int, str | None]:
    return {i: s.output for i, s in store.load_steps(run_id).items()}


def test_a_strict_step_carries_the_deferred_records(store):
    fence = claimed(store, "c1")
    written = store.record_step("c1", fence, strict(2), carried=deferred(0, 1))
    assert written.outcome is Outcome.RECORDED
    assert recorded(store, "c1") == {0: "0", 1: "10", 2: "1"}


def test_the_settle_carries_them(store):
    fence = claimed(store, "c2")
    assert store.settle_run("c2", fence, "SUCCEEDED", result="1", carried=deferred(0, 1, 2))
    assert recorded(store, "c2") == {0: "0", 1: "10", 2: "20"}
    assert store.get_run("c2").status == "SUCCEEDED"


@pytest.mark.parametrize("write", ["record", "settle", "set_state", "suspend", "dispatch"])
def test_without_the_lease_they_are_not_written(store, write):
    fence = claimed(store, f"c3{write}")
    run_id, stale, carried = f"c3{write}", fence + 1, deferred(0, 1)
    if write == "record":
        outcome = store.record_step(run_id, stale, strict(2), carried=carried).outcome
        assert outcome is Outcome.LEASE_LOST
    elif write == "settle":
        assert store.settle_run(run_id, stale, "SUCCEEDED", carried=carried) is None
    elif write == "set_state":
        assert not store.waits.set_state(run_id, stale, "k", "1", carried=carried)
    elif write == "suspend":
        waiting = StepRecord(2, "sleep", "waiting", "[[],{}]", "{}", None)
        outcome = store.waits.suspend_run(run_id, stale, waiting, None, None, carried)
        assert outcome is Outcome.LEASE_LOST
    else:
        outcome = store.fanout.insert_fanout(run_id, stale, started(2, 1), fan(1), carried).outcome
        assert outcome is Outcome.LEASE_LOST
    assert recorded(store, run_id) == {}


def test_a_cancelled_run_settles_cancelled_without_them(store):
    fence = claimed(store, "c4")
    store.cancel_run("c4", "stop")
    assert store.settle_run("c4", fence, "SUCCEEDED", carried=deferred(0)) == "CANCELLED"
    assert recorded(store, "c4") == {}


def test_suspensions_set_state_retries_and_fan_outs_carry_them(store):
    fence = claimed(store, "c5")
    assert store.waits.set_state("c5", fence, "k", '"v"', carried=deferred(0))
    taken = store.waits.consume_signal("c5", fence, "go", strict(9), carried=deferred(1))
    assert taken.outcome is Outcome.NO_SIGNAL  # still commits what it carried
    written = store.fanout.insert_fanout("c5", fence, started(2, 1), fan(1), deferred(3))
    assert written.outcome is Outcome.RECORDED
    assert store.fanout.suspend_on_items("c5", fence, [2], None, None, deferred(4)) is (
        Outcome.SUSPENDED
    )
    assert recorded(store, "c5") == {0: "0", 1: "10", 2: None, 3: "30", 4: "40"}
    fence = claimed(store, "c6")
    waiting = StepRecord(1, "sleep", "waiting", "[[],{}]", "{}", None)
    assert store.waits.suspend_run("c6", fence, waiting, None, None, deferred(0)) is (
        Outcome.SUSPENDED
    )
    fence = claimed(store, "c7")
    assert store.schedule_retry("c7", fence, 0.0, "{}", None, deferred(0, 1)) == "PENDING"
    assert recorded(store, "c6") == {0: "0", 1: "{}"}
    assert recorded(store, "c7") == {0: "0", 1: "10"}


def test_the_settle_carries_any_text_and_every_field_exactly(store):
    """The settle's records travel as one JSON document (Postgres): text that JSON must
    escape, non-ASCII, NULLs and exact floats come back as they went in."""
    fence = claimed(store, "c6")
    awkward = '{"q": "\\"quoted\\"", "bs": "\\\\", "nl": "a\\nb", "u": "\\u00e9"} ünïcødé ✓ 𝄞'
    records = [
        StepRecord(0, "d'quote", "ok", awkward, awkward, None, 0.1 + 0.2),
        StepRecord(1, "d", "error", "[[],{}]", None, '{"type": "ValueError"}', None),
        StepRecord(2, "d", "ok", "x" * 100_000, "%(p_run_id)s $1 ?", None, 1e-9),
    ]
    assert store.settle_run("c6", fence, "SUCCEEDED", result="1", carried=records)
    loaded = store.load_steps("c6")
    assert [
        (s.name, s.status, s.input, s.output, s.error, s.duration) for s in loaded.values()
    ] == [(r.name, r.status, r.input, r.output, r.error, r.duration) for r in records]
    assert {s.attempt for s in loaded.values()} == {1}
