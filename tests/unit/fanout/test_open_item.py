"""An item's first delivery in one open transaction (Postgres): the advisory lock keeps
every other claimant out, the record and the parent's wake-up commit together, a long step
is converted to a claim, and a dead connection frees the item at once."""

from __future__ import annotations

import psycopg
import pytest

from celery_durable.fanout.open_item import CLAIM, RUN, SKIP, OpenItem
from celery_durable.store import Outcome, Store
from tests.conftest import store_on
from tests.support.builders import claimed, fan, started
from tests.support.services import PG_URL


@pytest.fixture
def pg(pg_store: Store) -> Store:
    return pg_store


def opened(store: Store, run_id: str, item: int) -> OpenItem:
    it = store.fanout.open_item(run_id, 0, item)
    assert it.verdict == RUN and it.claim is not None
    return it


def item_state(store: Store, run_id: str, item: int) -> tuple[str, int]:
    row = next(r for r in store.fanout.list_items(run_id) if r.item == item)
    return row.status, row.attempts


def test_sqlite_takes_the_claimed_path(tmp_path):
    with store_on("sqlite", tmp_path) as store:
        fence = claimed(store, "s1")
        store.fanout.insert_fanout("s1", fence, started(0, 1), fan(1))
        assert store.fanout.open_item("s1", 0, 0).verdict == CLAIM


def test_an_open_item_keeps_others_out_records_and_wakes_the_parent(pg):
    fence = claimed(pg, "o1")
    pg.fanout.insert_fanout("o1", fence, started(0, 2), fan(2, grace=0))
    first = opened(pg, "o1", 0)
    assert first.claim.input == "[[0],{}]"
    # While it is open, every other claimant stays out: a duplicate delivery on either
    # path, and the sweeper, for which the item is overdue (grace 0).
    assert pg.fanout.open_item("o1", 0, 0).verdict == SKIP
    assert pg.fanout.claim_item("o1", 0, 0, "dup", lease=30) is None
    swept = pg.fanout.sweep_due_items(10, 0, ["s"])
    assert [(d.item) for d in swept] == [1]  # only the item nobody runs
    second = pg.fanout.open_item("o1", 0, 1)
    assert second.verdict == CLAIM  # re-dispatched by the sweeper: the claimed path
    assert pg.fanout.suspend_on_items("o1", fence, [0]) is Outcome.SUSPENDED
    assert first.settle("ok", "1", None, 60).woken is None
    claim = pg.fanout.claim_item("o1", 0, 1, "b", lease=30)
    assert claim is not None and claim.attempts == 1
    woken = pg.fanout.settle_item("o1", 0, 1, "b", "ok", "2", None, 60).woken
    assert woken is not None and woken.id == "o1"
    assert pg.fanout.load_items("o1", [0])[0].outputs == ["1", "2"]
    assert item_state(pg, "o1", 0) == ("ok", 1)
    # Recorded: a duplicate delivery finds nothing to run, on either path.
    assert pg.fanout.open_item("o1", 0, 0).verdict == SKIP
    assert pg.fanout.claim_item("o1", 0, 0, "late", lease=30) is None


def test_the_last_open_item_wakes_the_run_in_its_commit(pg):
    fence = claimed(pg, "o2")
    pg.fanout.insert_fanout("o2", fence, started(0, 1), fan(1))
    only = opened(pg, "o2", 0)
    assert pg.fanout.suspend_on_items("o2", fence, [0]) is Outcome.SUSPENDED
    woken = only.settle("ok", "7", None, 60).woken
    assert woken is not None and woken.status == "PENDING"
    assert pg.get_run("o2").status == "PENDING"


def test_a_dead_connection_frees_the_item_at_once(pg):
    fence = claimed(pg, "o3")
    pg.fanout.insert_fanout("o3", fence, started(0, 1), fan(1))
    victim = opened(pg, "o3", 0)
    pid = victim._record.dbapi_connection.info.backend_pid
    with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    # The worker that held it is gone: a redelivery runs it (claimed, counted).
    claim = pg.fanout.claim_item("o3", 0, 0, "next", lease=30)
    assert claim is not None and claim.attempts == 1
    with pytest.raises(psycopg.OperationalError):
        victim.settle("ok", "dead", None, 60)
    assert (
        pg.fanout.settle_item("o3", 0, 0, "next", "ok", "9", None, 60).outcome is Outcome.RECORDED
    )
    assert pg.fanout.load_items("o3", [0])[0].outputs == ["9"]


def test_a_long_item_is_converted_to_a_claim(pg):
    fence = claimed(pg, "o4")
    pg.fanout.insert_fanout("o4", fence, started(0, 1), fan(1, grace=0))
    long = opened(pg, "o4", 0)
    assert long.convert("host:1:ab:1", lease=30)
    assert not long.convert("host:1:ab:2", lease=30)  # once
    assert item_state(pg, "o4", 0) == ("running", 1)
    # A live lease now keeps the others out, with no open transaction.
    assert pg.fanout.claim_item("o4", 0, 0, "dup", lease=30) is None
    assert pg.fanout.sweep_due_items(10, 0, ["s"]) == []
    assert long.settle("ok", "5", None, 60).outcome is Outcome.RECORDED
    assert item_state(pg, "o4", 0) == ("ok", 1)


def test_cancel_stops_pending_items_and_lets_a_running_one_record(pg):
    fence = claimed(pg, "o5")
    pg.fanout.insert_fanout("o5", fence, started(0, 2), fan(2))
    running = opened(pg, "o5", 0)
    pg.cancel_run("o5", "stop")
    assert item_state(pg, "o5", 1)[0] == "cancelled"
    assert pg.fanout.open_item("o5", 0, 1).verdict == "skip"  # never runs
    assert running.settle("ok", "1", None, 60).outcome is Outcome.RECORDED
    assert item_state(pg, "o5", 0) == ("ok", 1)


def test_a_retry_from_an_open_item_waits_in_the_database(pg):
    fence = claimed(pg, "o6")
    pg.fanout.insert_fanout("o6", fence, started(0, 1), fan(1))
    failing = opened(pg, "o6", 0)
    assert failing.retry(0.0, '{"type":"x"}')
    assert item_state(pg, "o6", 0) == ("pending", 1)
    # Its old message can't run it; the sweeper's new one is a claim (attempt 2).
    assert pg.fanout.open_item("o6", 0, 0).verdict == CLAIM
    assert pg.fanout.claim_item("o6", 0, 0, "early", lease=30) is None
    assert [d.item for d in pg.fanout.sweep_due_items(10, 60, ["s"])] == [0]
    claim = pg.fanout.claim_item("o6", 0, 0, "again", lease=30)
    assert claim is not None and claim.attempts == 2


def test_an_abandoned_item_is_left_as_it_was(pg):
    fence = claimed(pg, "o7")
    pg.fanout.insert_fanout("o7", fence, started(0, 1), fan(1))
    opened(pg, "o7", 0).abandon()
    assert item_state(pg, "o7", 0) == ("pending", 0)
    opened(pg, "o7", 0).abandon()


def test_a_revoke_while_the_item_runs_open_wins_over_its_record(pg):
    fence = claimed(pg, "o9")
    pg.fanout.insert_fanout("o9", fence, started(0, 1), fan(1))
    running = opened(pg, "o9", 0)
    assert pg.fanout.suspend_on_items("o9", fence, [0]) is Outcome.SUSPENDED
    revoked = pg.fanout.revoke_item("o9", 0, 0, '{"type":"x","message":"revoked"}', 60)
    assert revoked is not None and revoked.woken is not None  # not held up by the lock
    assert running.settle("ok", "1", None, 60).outcome is Outcome.LEASE_LOST
    assert item_state(pg, "o9", 0) == ("revoked", 0)
