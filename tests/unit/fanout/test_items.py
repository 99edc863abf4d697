"""The store's item operations on both databases: the fence (first writer wins), the
wake-up in the recording transaction, the sweeper's backstops, cancellation."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import sqlalchemy as sa

from celery_durable.fanout import items as items_module
from celery_durable.store import FanOut, Outcome, StepRecord
from tests.support.builders import claimed, fan, new_run, started
from tests.support.plans import fill_analysed, plans_during
from tests.support.waiting import wait_until


def test_a_fan_out_is_one_step_row_and_its_items(store):
    fence = claimed(store, "r1")
    assert (
        store.fanout.insert_fanout("r1", fence, started(0, 3), fan(3)).outcome is Outcome.RECORDED
    )
    again = store.fanout.insert_fanout("r1", fence, started(0, 3), fan(3))
    assert again.outcome is Outcome.EXISTS and again.stored.status == "started"
    assert [s.status for s in store.load_steps("r1").values()] == ["started"]
    rows = store.fanout.list_items("r1")
    assert [(r.idx, r.item, r.status) for r in rows] == [(0, n, "pending") for n in range(3)]


def test_a_fan_out_s_rows_go_in_rounds_numbered_in_input_order(store, monkeypatch):
    # Postgres inserts them in one statement per round, fed by one JSON parameter: rounds
    # of 4 items here, one cut short by the bytes bound, and inputs JSON must escape.
    monkeypatch.setattr(items_module, "ROWS_PER_INSERT", 4)
    monkeypatch.setattr(items_module, "BYTES_PER_INSERT", 60)
    fence = claimed(store, "r0")
    inputs = [f'[["é \\u00e9 \\"{n}\\"\\n"],{{}}]' for n in range(9)] + ["[[" + "9" * 70 + "],{}]"]
    inputs += [f"[[{n}],{{}}]" for n in range(10, 13)]
    written = store.fanout.insert_fanout("r0", fence, started(0, 13), FanOut("s", "q", inputs, 60))
    assert written.outcome is Outcome.RECORDED
    claims = store.fanout.claim_batch("r0", 0, 0, 13, "a", lease=30)
    assert [(item, c.input) for item, c in claims] == list(enumerate(inputs))
    rows = store.fanout.list_items("r0")
    assert {(r.status, r.queue, r.dispatches) for r in rows} == {("running", "q", 1)}


def test_item_claim_is_fenced_and_the_first_writer_wins(store):
    fence = claimed(store, "r2")
    store.fanout.insert_fanout("r2", fence, started(0, 2), fan(2))
    claim = store.fanout.claim_item("r2", 0, 0, "a", lease=30)
    assert claim is not None and (claim.status, claim.input, claim.attempts) == (
        "running",
        "[[0],{}]",
        1,
    )
    assert store.fanout.claim_item("r2", 0, 0, "b", lease=30) is None  # live lease: a duplicate
    assert (
        store.fanout.settle_item("r2", 0, 0, "b", "ok", "9", None, 60).outcome is Outcome.LEASE_LOST
    )
    assert (
        store.fanout.settle_item("r2", 0, 0, "a", "ok", "1", None, 60).outcome is Outcome.RECORDED
    )
    assert (
        store.fanout.settle_item("r2", 0, 0, "a", "ok", "2", None, 60).outcome is Outcome.LEASE_LOST
    )
    assert store.fanout.claim_item("r2", 0, 0, "c", lease=30) is None  # recorded: never runs again
    # An expired lease is taken over (a recovery, not an attempt); the old owner is fenced.
    assert store.fanout.claim_item("r2", 0, 1, "dead", lease=0.01) is not None
    taken = wait_until(lambda: store.fanout.claim_item("r2", 0, 1, "next", lease=30), 10)
    assert taken.attempts == 1
    assert store.fanout.settle_item("r2", 0, 1, "dead", "ok", "0", None, 60).outcome is (
        Outcome.LEASE_LOST
    )
    assert store.fanout.settle_item("r2", 0, 1, "next", "ok", "3", None, 60).outcome is (
        Outcome.RECORDED
    )
    states = store.fanout.load_items("r2", [0])
    assert states[0].outputs == ["1", "3"] and states[0].unsettled == 0


def test_the_last_awaited_item_wakes_the_run_in_its_own_transaction(store):
    fence = claimed(store, "r3")
    store.fanout.insert_fanout("r3", fence, started(0, 2), fan(2))
    for item, owner in ((0, "a"), (1, "b")):
        store.fanout.claim_item("r3", 0, item, owner, lease=30)
    assert store.fanout.suspend_on_items("r3", fence, [0]) is Outcome.SUSPENDED
    run = store.get_run("r3")
    assert (run.status, run.owner, run.wait_items) == ("WAITING", None, True)
    assert store.fanout.settle_item("r3", 0, 0, "a", "ok", "1", None, 60).woken is None
    woken = store.fanout.settle_item("r3", 0, 1, "b", "error", None, '{"type":"x"}', 60).woken
    assert woken is not None and woken.id == "r3" and woken.status == "PENDING"
    run = store.get_run("r3")
    assert (run.status, run.wait_items) == ("PENDING", False)
    assert run.due_at is not None  # a lost wake-up message: the sweeper publishes it again
    state = store.fanout.load_items("r3", [0])[0]
    assert state.outputs == ["1", None] and state.failures[1].status == "error"


def test_a_body_does_not_suspend_when_its_items_have_settled(store):
    fence = claimed(store, "r4")
    store.fanout.insert_fanout("r4", fence, started(0, 1), fan(1))
    store.fanout.claim_item("r4", 0, 0, "a", lease=30)
    store.fanout.settle_item("r4", 0, 0, "a", "ok", "1", None, 60)
    assert store.fanout.suspend_on_items("r4", fence, [0]) is Outcome.SETTLED
    assert store.get_run("r4").status == "RUNNING"


def test_only_the_awaited_indices_hold_a_suspended_run(store):
    fence = claimed(store, "r5")
    store.fanout.insert_fanout("r5", fence, started(0, 1), fan(1))
    store.fanout.insert_fanout("r5", fence, started(1, 1), fan(1))
    store.fanout.claim_item("r5", 1, 0, "b", lease=30)
    assert store.fanout.suspend_on_items("r5", fence, [1]) is Outcome.SUSPENDED  # not step 0
    assert store.fanout.settle_item("r5", 1, 0, "b", "ok", "1", None, 60).woken is not None


def test_two_last_items_settling_at_once_wake_the_run_exactly_once(store):
    if not store.is_postgres:
        pytest.skip("SQLite serialises every writer")
    runs = [f"race-{n}" for n in range(30)]
    for run_id in runs:
        fence = claimed(store, run_id)
        store.fanout.insert_fanout(run_id, fence, started(0, 2), fan(2))
        store.fanout.claim_item(run_id, 0, 0, "a", lease=30)
        store.fanout.claim_item(run_id, 0, 1, "b", lease=30)
        assert store.fanout.suspend_on_items(run_id, fence, [0]) is Outcome.SUSPENDED
    woken: list[str] = []
    lock = threading.Lock()

    def settle(run_id: str, item: int, owner: str, gate: threading.Barrier) -> None:
        gate.wait()
        written = store.fanout.settle_item(run_id, 0, item, owner, "ok", "1", None, 60)
        if written.woken is not None:
            with lock:
                woken.append(written.woken.id)

    for run_id in runs:
        gate = threading.Barrier(2)
        threads = [
            threading.Thread(target=settle, args=(run_id, item, owner, gate))
            for item, owner in ((0, "a"), (1, "b"))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert sorted(woken) == sorted(runs)  # each once: never missed, never twice


def test_the_sweeper_takes_lost_publishes_expired_leases_and_due_retries(store):
    fence = claimed(store, "r6")
    store.fanout.insert_fanout("r6", fence, started(0, 3), fan(3, grace=0))
    # Item 0: a lost publish (grace 0). Item 1: its worker died (lease expired). Item 2:
    # a retry whose backoff is over.
    store.fanout.claim_item("r6", 0, 1, "dead", lease=0.01)
    store.fanout.claim_item("r6", 0, 2, "c", lease=30)
    assert store.fanout.retry_item("r6", 0, 2, "c", 0.0, '{"type":"x"}')
    assert store.fanout.claim_item("r6", 0, 2, "early", lease=30) is None  # not before the sweeper

    found: dict[int, Any] = {}

    def all_due() -> bool:
        for due in store.fanout.sweep_due_items(100, 60, ["s"], max_recoveries=3):
            found[due.item] = due
        return len(found) == 3

    wait_until(all_due, 10, message="the three items to be due")
    assert all(due.queue == "q" and due.run_id == "r6" for due in found.values())
    assert store.fanout.sweep_due_items(100, 60, ["s"], 3) == []  # due again only after the grace
    claim = store.fanout.claim_item("r6", 0, 1, "new", lease=30)
    assert claim is not None and claim.attempts == 1  # the lost worker was not an attempt
    assert store.fanout.claim_item("r6", 0, 2, "retry", lease=30).attempts == 2


def test_the_sweeper_takes_only_the_steps_of_its_app(store):
    fence = claimed(store, "r9")
    store.fanout.insert_fanout("r9", fence, started(0, 1), fan(1, grace=0))
    assert store.fanout.sweep_due_items(100, 60, ["another-apps-step"], 3) == []
    assert [d.item for d in store.fanout.sweep_due_items(100, 60, ["s"], 3)] == [0]


def test_a_run_never_woken_is_found_by_the_sweeper(store):
    fence = claimed(store, "r7")
    store.fanout.insert_fanout("r7", fence, started(0, 1), fan(1))
    store.fanout.suspend_on_items("r7", fence, [0])
    items = store.tables.items
    with store.db.transaction() as conn:  # settled by some path that did not wake it
        conn.execute(
            sa.update(items)
            .where(items.c.run_id == "r7")
            .values(status="ok", output="1", finished_at=1.0, due_at=None)
        )
    assert [r.id for r in store.fanout.wake_item_waiters(60, ["wf"])] == ["r7"]
    assert store.get_run("r7").status == "PENDING"


def test_a_finished_child_settles_its_parents_item(store):
    fence = claimed(store, "p1")
    child = new_run("p1:0")
    step = StepRecord(0, "celery_durable.child:wf", "started", "{}", None, None)
    written = store.fanout.insert_fanout(
        "p1", fence, step, FanOut(step.name, None, ["[[],{}]"], 60, child)
    )
    assert written.outcome is Outcome.RECORDED
    taken = store.fanout.insert_fanout(
        "p1",
        fence,
        StepRecord(1, "x", "started", "{}", None, None),
        FanOut("x", None, ["[]"], 60, child),
    )
    assert taken.outcome is Outcome.DUPLICATE  # the id is taken: nothing written
    assert 1 not in store.load_steps("p1")
    assert store.get_run("p1:0").parent_id == "p1"
    assert store.fanout.suspend_on_items("p1", fence, [0]) is Outcome.SUSPENDED
    child_claim = store.claim_run("p1:0", "w", lease=30)
    status, woken = store.fanout.settle_child_run(
        "p1:0",
        child_claim.fence,
        "SUCCEEDED",
        parent_id="p1",
        parent_idx=0,
        grace=60,
        result='"done"',
    )
    assert status == "SUCCEEDED" and woken is not None and woken.id == "p1"
    assert store.fanout.load_items("p1", [0])[0].outputs == ['"done"']
    assert store.fanout.orphaned_children(10) == []


def test_cancelling_a_parent_cancels_pending_items_and_children(store):
    fence = claimed(store, "p2")
    store.fanout.insert_fanout("p2", fence, started(0, 2), fan(2))
    store.fanout.claim_item("p2", 0, 1, "a", lease=30)
    for idx, detached in ((1, False), (2, True)):
        child = new_run(f"p2:{idx}")
        step = StepRecord(idx, "celery_durable.child:wf", "started", "{}", None, None)
        store.fanout.insert_fanout(
            "p2", fence, step, FanOut(step.name, None, ["[]"], 60, child, detached)
        )
    cancelled = store.cancel_run("p2", "stop")
    assert (cancelled.requested, cancelled.status) == (True, "RUNNING")  # at its next step
    statuses = {(r.idx, r.item): (r.status, r.child_status) for r in store.fanout.list_items("p2")}
    assert statuses[(0, 0)] == ("cancelled", None)  # pending: never runs
    assert statuses[(0, 1)] == ("running", None)  # running: records its outcome
    assert statuses[(1, 0)] == ("cancelled", "CANCELLED")
    assert statuses[(2, 0)] == ("pending", "PENDING")  # detached: survives
    assert store.get_run("p2:1").cancel_reason == "its parent run 'p2' was cancelled: stop"
    assert store.fanout.claim_item("p2", 0, 0, "late", lease=30) is None


def test_an_item_of_a_finished_run_is_not_run(store):
    fence = claimed(store, "r8")
    store.fanout.insert_fanout("r8", fence, started(0, 1), fan(1))
    assert store.settle_run("r8", fence, "SUCCEEDED", result="1") == "SUCCEEDED"
    claim = store.fanout.claim_item("r8", 0, 0, "a", lease=30)
    assert claim is not None and claim.status == "cancelled"
    assert store.fanout.load_items("r8", [0])[0].failures[0].status == "cancelled"


def test_a_revoked_item_settles_as_a_failure_whatever_it_was_doing(store):
    fence = claimed(store, "r9")
    store.fanout.insert_fanout("r9", fence, started(0, 3), fan(3))
    assert store.fanout.claim_item("r9", 0, 1, "a", lease=30) is not None  # running
    store.fanout.settle_item("r9", 0, 1, "a", "ok", "1", None, 60)
    assert store.fanout.claim_item("r9", 0, 2, "b", lease=30) is not None  # running
    assert store.fanout.suspend_on_items("r9", fence, [0]) is Outcome.SUSPENDED
    revoked = '{"type":"celery.exceptions.TaskRevokedError","message":"revoked"}'
    pending = store.fanout.revoke_item("r9", 0, 0, revoked, 60)
    assert pending is not None and pending.woken is None  # item 2 is still open
    assert store.fanout.revoke_item("r9", 0, 1, revoked, 60) is None  # settled: unchanged
    running = store.fanout.revoke_item("r9", 0, 2, revoked, 60)
    assert running is not None and running.woken is not None and running.woken.id == "r9"
    # The delivery that ran it can't record it; no delivery claims it again.
    assert (
        store.fanout.settle_item("r9", 0, 2, "b", "ok", "2", None, 60).outcome is Outcome.LEASE_LOST
    )
    assert store.fanout.claim_item("r9", 0, 0, "c", lease=30) is None
    assert [r.status for r in store.fanout.list_items("r9")] == ["revoked", "ok", "revoked"]
    state = store.fanout.load_items("r9", [0])[0]
    assert state.unsettled == 0 and sorted(state.failures) == [0, 2]
    assert state.failures[0].status == "revoked" and state.failures[0].error == revoked


def test_the_sweeper_s_look_for_due_items_reads_the_due_index_not_every_item(pg_store):
    """Every poll looks for due items: among 20,000 items in flight, whose leases lie
    ahead, it reads the range of ix_items_due that is due (a volatile clock in the range
    made it a filter of every item's entry, about 50 ms here at 20,000)."""
    fill_analysed(
        pg_store,
        pg_store.tables.items.name,
        "namespace, run_id, idx, item, name, status, input, owner, due_at, created_at",
        "CAST(:ns AS TEXT), 'r' || (g / 1000), 3, g % 1000, 's', 'running', '[]', 'o', "
        "extract(epoch FROM now()) + 60 + g * 0.01, 0",
        20_000,
    )

    def sweep() -> None:
        assert pg_store.fanout.sweep_due_items(100, 60, ["s"], 3) == []
        assert pg_store.fanout.lost_items(100, ["s"], 3) == []

    plans = plans_during(pg_store, sweep, "due_at")
    assert len(plans) == 2
    for plan in plans:
        index_conditions = [line for line in plan.splitlines() if "Index Cond" in line]
        assert any("due_at <=" in line for line in index_conditions), plan
