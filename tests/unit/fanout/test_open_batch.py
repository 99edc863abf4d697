"""A batch's first delivery in one open transaction (Postgres): every item's advisory lock
keeps other claimants out, the records and the parent's wake-up commit together, a batch
past a lease beat turns the rest into a claim, a cancelled run's rest is cancelled, a
dead connection frees the items at once, and what can't run open takes the claimed path."""

from __future__ import annotations

import psycopg
import pytest

from celery_durable.fanout.open_batch import MOST_ITEMS_OPEN, OpenBatch
from celery_durable.store import Outcome, Settled, Store
from tests.conftest import store_on
from tests.support.builders import claimed, fan, started
from tests.support.services import PG_URL


@pytest.fixture
def pg(pg_store: Store) -> Store:
    return pg_store


def dispatched(store: Store, run_id: str, count: int, grace: float = 60.0) -> int:
    fence = claimed(store, run_id)
    fanned = fan(count, grace, count)
    assert store.fanout.insert_fanout(run_id, fence, started(0, count), fanned).outcome is (
        Outcome.RECORDED
    )
    return fence


def opened(store: Store, run_id: str, first: int, count: int) -> OpenBatch:
    batch = store.fanout.open_batch(run_id, 0, first, count)
    assert batch.is_open and [item for item, _ in batch.claims] == list(range(first, first + count))
    return batch


def states(store: Store, run_id: str) -> dict[int, tuple[str, int]]:
    return {row.item: (row.status, row.attempts) for row in store.fanout.list_items(run_id)}


def test_sqlite_takes_the_claimed_path(tmp_path):
    with store_on("sqlite", tmp_path) as store:
        dispatched(store, "s1", 2)
        batch = store.fanout.open_batch("s1", 0, 0, 2)
        assert batch.claims == [] and not batch.is_open


def test_an_open_batch_keeps_others_out_records_once_and_wakes_the_parent(pg):
    fence = dispatched(pg, "b1", 3, grace=0)
    batch = opened(pg, "b1", 0, 3)
    assert [(c.input, c.attempts) for _, c in batch.claims] == [
        (f"[[{n}],{{}}]", 1) for n in range(3)
    ]
    # While it is open, every other claimant stays out: a duplicate delivery on either
    # path, one item's claim, the sweeper (the items are overdue: grace 0) and a cancel.
    assert not pg.fanout.open_batch("b1", 0, 0, 3).is_open
    assert pg.fanout.claim_batch("b1", 0, 0, 3, "dup", lease=30) == []
    assert pg.fanout.claim_item("b1", 0, 1, "dup", lease=30) is None
    assert pg.fanout.sweep_due_items(10, 0, ["s"]) == []
    assert pg.fanout.suspend_on_items("b1", fence, [0]) is Outcome.SUSPENDED
    # Nothing is written until the record: every item is still as dispatched.
    assert states(pg, "b1") == dict.fromkeys(range(3), ("pending", 0))
    outcomes = [Settled(0, "ok", "0"), Settled(1, "error", error='{"e":1}'), Settled(2, "ok", "2")]
    written, converted = batch.settle(outcomes, 60)
    assert written.recorded == [0, 1, 2] and converted == []
    assert written.woken is not None and written.woken.id == "b1"
    assert not batch.is_open
    assert states(pg, "b1") == {0: ("ok", 1), 1: ("error", 1), 2: ("ok", 1)}
    assert pg.fanout.load_items("b1", [0])[0].outputs[0::2] == ["0", "2"]
    # Recorded: a duplicate delivery finds nothing, on either path.
    assert not pg.fanout.open_batch("b1", 0, 0, 3).is_open
    assert pg.fanout.claim_batch("b1", 0, 0, 3, "late", lease=30) == []


def test_past_a_lease_beat_the_rest_becomes_a_claimed_batch(pg):
    dispatched(pg, "b2", 4, grace=0)
    batch = opened(pg, "b2", 0, 4)
    written, converted = batch.settle([Settled(0, "ok", "0")], 60, convert=("host:1:ab:7", 30))
    assert written.recorded == [0] and converted == [1, 2, 3]
    assert states(pg, "b2") == {0: ("ok", 1), **dict.fromkeys((1, 2, 3), ("running", 1))}
    # A live lease keeps the others out now, with no open transaction.
    assert pg.fanout.claim_batch("b2", 0, 0, 4, "dup", lease=30) == []
    assert pg.fanout.sweep_due_items(10, 0, ["s"]) == []
    assert pg.fanout.check_batch("b2", 0, 0, 4, "host:1:ab:7") == (True, {1, 2, 3})
    rest = [Settled(n, "ok", str(n)) for n in (1, 2, 3)]
    assert pg.fanout.settle_batch("b2", 0, "host:1:ab:7", rest, 60).recorded == [1, 2, 3]
    assert states(pg, "b2") == dict.fromkeys(range(4), ("ok", 1))  # one attempt each


def test_a_retry_waits_in_the_database_and_is_claimed_alone(pg):
    dispatched(pg, "b3", 2)
    batch = opened(pg, "b3", 0, 2)
    outcomes = [Settled(0, "retry", error='{"type":"x"}', delay=0.0), Settled(1, "ok", "1")]
    written, _ = batch.settle(outcomes, 60, convert=("host:1:ab:8", 30))
    assert written.recorded == [0, 1]
    assert states(pg, "b3") == {0: ("pending", 1), 1: ("ok", 1)}  # the retry is not converted
    assert [d.item for d in pg.fanout.sweep_due_items(10, 60, ["s"])] == [0]
    claim = pg.fanout.claim_item("b3", 0, 0, "again", lease=30)
    assert claim is not None and claim.attempts == 2


def test_a_cancelled_run_lets_what_ran_record_and_cancels_the_rest(pg):
    dispatched(pg, "b4", 3)
    batch = opened(pg, "b4", 0, 3)
    pg.cancel_run("b4", "stop")
    # The cancel leaves the locked items to the batch, which reads that its run is over.
    assert states(pg, "b4") == dict.fromkeys(range(3), ("pending", 0))
    assert pg.fanout.check_batch("b4", 0, 0, 3, None) == (False, {0, 1, 2})
    written, converted = batch.settle([Settled(0, "ok", "0")], 60, cancel_rest=True)
    assert written.recorded == [0] and converted == []
    assert states(pg, "b4") == {0: ("ok", 1), 1: ("cancelled", 0), 2: ("cancelled", 0)}


def test_a_revoke_while_the_batch_runs_open_wins_over_its_record(pg):
    fence = dispatched(pg, "b5", 2)
    batch = opened(pg, "b5", 0, 2)
    assert pg.fanout.suspend_on_items("b5", fence, [0]) is Outcome.SUSPENDED
    assert pg.fanout.revoke_item("b5", 0, 1, '{"type":"x","message":"revoked"}', 60) is not None
    assert pg.fanout.check_batch("b5", 0, 0, 2, None) == (True, {0})  # item 1 is not run
    written, _ = batch.settle([Settled(0, "ok", "0"), Settled(1, "ok", "1")], 60)
    assert written.recorded == [0] and written.woken is not None
    assert states(pg, "b5") == {0: ("ok", 1), 1: ("revoked", 0)}


def test_a_dead_connection_frees_the_items_at_once(pg):
    dispatched(pg, "b6", 2)
    victim = opened(pg, "b6", 0, 2)
    pid = victim._record.dbapi_connection.info.backend_pid
    with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    # A redelivery claims them (counted as their first attempt: nothing was recorded).
    claims = pg.fanout.claim_batch("b6", 0, 0, 2, "next", lease=30)
    assert [(item, c.attempts) for item, c in claims] == [(0, 1), (1, 1)]
    with pytest.raises(psycopg.OperationalError):
        victim.settle([Settled(0, "ok", "dead")], 60)
    assert pg.fanout.settle_batch("b6", 0, "next", [Settled(0, "ok", "9")], 60).recorded == [0]


def test_what_cannot_run_open_takes_the_claimed_path(pg):
    dispatched(pg, "b7", 3)
    abandoned = opened(pg, "b7", 0, 3)
    abandoned.abandon()  # left as it was: the next first delivery opens it again
    assert states(pg, "b7") == dict.fromkeys(range(3), ("pending", 0))
    pg.fanout.revoke_item("b7", 0, 2, '{"type":"x"}', 60)
    assert not pg.fanout.open_batch("b7", 0, 0, 3).is_open  # one item is settled already
    assert pg.fanout.open_batch("b7", 0, 0, 2).is_open  # the others alone can
    pg.fanout.open_batch("b7", 0, 0, 2).abandon()


def test_a_batch_larger_than_the_lock_budget_is_claimed(pg):
    count = MOST_ITEMS_OPEN + 1
    dispatched(pg, "b8", count)
    assert not pg.fanout.open_batch("b8", 0, 0, count).is_open
    assert len(pg.fanout.claim_batch("b8", 0, 0, count, "a", lease=30)) == count
