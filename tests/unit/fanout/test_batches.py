"""The store's batch operations on both databases: one claim for a batch's items, one
transaction for their records (first writer wins, each item), the parent's wake-up, a
cancelled run's items not run yet, and replay reading the records in one query."""

from __future__ import annotations

from celery_durable.store import Outcome, Settled
from tests.support.builders import claimed, fan, started
from tests.support.waiting import wait_until


def _dispatched(store, run_id: str, count: int, grace: float = 60.0, batch_size: int = 1) -> int:
    fence = claimed(store, run_id)
    fanned = fan(count, grace, batch_size)
    assert store.fanout.insert_fanout(run_id, fence, started(0, count), fanned).outcome is (
        Outcome.RECORDED
    )
    return fence


def test_a_batch_claims_its_range_in_one_statement_and_records_in_one_transaction(store):
    fence = _dispatched(store, "b1", 5)
    claims = store.fanout.claim_batch("b1", 0, 1, 3, "a", lease=30)
    assert [(item, c.status, c.input, c.attempts) for item, c in claims] == [
        (n, "running", f"[[{n}],{{}}]", 1) for n in (1, 2, 3)
    ]
    assert store.fanout.claim_batch("b1", 0, 1, 3, "dup", lease=30) == []  # live leases
    assert store.fanout.suspend_on_items("b1", fence, [0]) is Outcome.SUSPENDED
    outcomes = [Settled(1, "ok", "1"), Settled(2, "error", error='{"e":1}'), Settled(3, "ok", "9")]
    written = store.fanout.settle_batch("b1", 0, "a", outcomes, 60)
    assert written.recorded == [1, 2, 3] and written.woken is None  # items 0 and 4 are left
    # The first writer wins, per item: a second record changes nothing.
    again = store.fanout.settle_batch("b1", 0, "a", [Settled(1, "ok", "2")], 60)
    assert again.recorded == []
    rest = store.fanout.claim_batch("b1", 0, 0, 5, "b", lease=30)
    assert [item for item, _ in rest] == [0, 4]  # the recorded ones never run again
    woke = store.fanout.settle_batch(
        "b1", 0, "b", [Settled(0, "ok", "0"), Settled(4, "ok", "4")], 60
    )
    assert woke.woken is not None and woke.woken.id == "b1"
    # Replay reads every item's record in one query, in input order.
    state = store.fanout.load_items("b1", [0])[0]
    assert state.outputs == ["0", "1", None, "9", "4"] and state.unsettled == 0
    assert sorted(state.failures) == [2]


def test_a_batch_records_a_retry_and_loses_items_taken_over_or_revoked(store):
    _dispatched(store, "b2", 3)
    store.fanout.claim_batch("b2", 0, 0, 3, "a", lease=30)
    assert store.fanout.revoke_item("b2", 0, 1, '{"e":"revoked"}', 60) is not None
    active, held = store.fanout.check_batch("b2", 0, 0, 3, "a")
    assert active and held == {0, 2}  # a revoke ends the hold on its item
    outcomes = [Settled(0, "retry", error='{"e":2}', delay=0.0), Settled(1, "ok", "1")]
    written = store.fanout.settle_batch("b2", 0, "a", outcomes, 60)
    assert written.recorded == [0]  # the retry; the revoked item keeps its revoke
    rows = {r.item: (r.status, r.attempts) for r in store.fanout.list_items("b2")}
    assert rows == {0: ("pending", 1), 1: ("revoked", 1), 2: ("running", 1)}
    # A retry is the sweeper's to publish again, as an item task of its own.
    due = wait_until(lambda: store.fanout.sweep_due_items(10, 60, ["s"]), 10)
    assert [(d.run_id, d.item) for d in due] == [("b2", 0)]


def test_a_cancelled_run_stops_its_batch_and_cancels_the_items_not_run(store):
    _dispatched(store, "b3", 4)
    store.fanout.claim_batch("b3", 0, 0, 4, "a", lease=30)
    store.cancel_run("b3", "enough", 60)
    active, held = store.fanout.check_batch("b3", 0, 0, 4, "a")
    assert not active and held == {0, 1, 2, 3}
    # Item 0 ran: it is recorded, as a running item of a cancelled run is.
    written = store.fanout.settle_batch(
        "b3", 0, "a", [Settled(0, "ok", "0")], 60, cancel_rest=(0, 4)
    )
    assert written.recorded == [0] and written.woken is None
    rows = {r.item: r.status for r in store.fanout.list_items("b3")}
    assert rows == {0: "ok", 1: "cancelled", 2: "cancelled", 3: "cancelled"}


def test_a_batch_of_a_run_already_cancelled_claims_its_items_cancelled(store):
    _dispatched(store, "b4", 2)
    store.cancel_run("b4", None, 60)
    rows = {r.item: r.status for r in store.fanout.list_items("b4")}
    assert set(rows.values()) == {"cancelled"}  # pending items, cancelled with the run
    assert store.fanout.claim_batch("b4", 0, 0, 2, "a", lease=30) == []


def test_an_expired_batch_lease_is_taken_over_item_by_item(store):
    _dispatched(store, "b5", 3)
    store.fanout.claim_batch("b5", 0, 0, 3, "dead", lease=0.01)
    store.fanout.settle_batch(
        "b5", 0, "dead", [Settled(0, "ok", "0")], 60
    )  # committed before the crash
    taken = wait_until(lambda: store.fanout.claim_item("b5", 0, 1, "next", lease=30), 10)
    assert taken.attempts == 1  # a recovery, not an attempt
    redelivered = store.fanout.claim_batch("b5", 0, 0, 3, "again", lease=30)
    assert [item for item, _ in redelivered] == [2]  # item 0 is recorded, 1 is taken
    assert store.fanout.settle_batch("b5", 0, "dead", [Settled(2, "ok", "x")], 60).recorded == []


def test_the_sweep_tells_an_items_batch_and_whether_it_ever_started(store):
    _dispatched(store, "b5", 4, grace=0.0, batch_size=2)
    _dispatched(store, "b6", 1, grace=0.0)  # one task per item
    store.fanout.claim_batch("b5", 0, 0, 2, "a", lease=30)
    outcomes = [Settled(0, "retry", error='{"e":1}', delay=0.0), Settled(1, "ok", "1")]
    store.fanout.settle_batch("b5", 0, "a", outcomes, 60)
    due: list = []
    wait_until(lambda: due.extend(store.fanout.sweep_due_items(10, 60, ["s"])) or len(due) >= 4, 10)
    seen = {(d.run_id, d.item): (d.batch_size, d.never_started) for d in due}
    # Items 2 and 3 never started (their batch's message lost, or queued past the grace):
    # they go again as their batch; item 0 ran once and goes alone.
    assert seen == {
        ("b5", 0): (2, False),
        ("b5", 2): (2, True),
        ("b5", 3): (2, True),
        ("b6", 0): (None, True),
    }


def test_a_batch_past_item_32767_claims_its_range(store):
    """Bug: psycopg sent ``first`` and ``count`` as smallints, so ``first + count`` past
    32,767 overflowed on Postgres ("smallint out of range") and the batch of items
    32,500-32,999 of a 100,000-item map never ran."""
    _dispatched(store, "b7", 33_000, batch_size=500)
    claims = store.fanout.claim_batch("b7", 0, 32_500, 500, "a", lease=30)
    assert [item for item, _ in claims] == list(range(32_500, 33_000))
    active, held = store.fanout.check_batch("b7", 0, 32_500, 500, "a")
    assert active and held == set(range(32_500, 33_000))
