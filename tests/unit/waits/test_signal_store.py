"""What the signals table may grow to, on both databases: the pending cap and the cap of
refused signals hold under concurrent senders, a refusal for a run that does not exist
is not kept, and gc deletes the signals whose run is gone."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from celery_durable.store import Outcome, Store
from tests.support.builders import new_run

SENDERS = 12
EACH = 25  # 300 signals in all, as in the issue


def at_once(send: Callable[[int, int], Any]) -> Counter[Any]:
    """``send(sender, i)`` from SENDERS threads at once, EACH times; what they returned."""
    outcomes: Counter[Any] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(SENDERS)

    def sender(n: int) -> None:
        start.wait()
        for i in range(EACH):
            got = send(n, i)
            with lock:
                outcomes[got] += 1

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sum(outcomes.values()) == SENDERS * EACH
    return outcomes


def signal_rows(store: Store, run_id: str) -> list[Any]:
    signals = store.tables.signals
    query = sa.select(signals).where(signals.c.namespace == store.namespace)
    with store.engine.connect() as conn:
        return list(conn.execute(query.where(signals.c.run_id == run_id)).all())


def test_the_pending_cap_holds_under_concurrent_senders(store):
    store.insert_run(new_run("busy"))
    outcomes = at_once(
        lambda n, i: store.waits.insert_signal("busy", "go", "1", f"{n}-{i}", 100).outcome
    )
    assert outcomes == {Outcome.STORED: 100, Outcome.FULL: 200}
    assert len(store.pending_signals("busy")) == 100


def test_refused_signals_kept_for_a_run_are_capped_too(store):
    """Bug: every refusal was kept with its payload, so a cap of 100 pending signals
    still let 300 rows (and their payloads) into the table."""
    store.insert_run(new_run("full"))
    for i in range(10):
        assert store.waits.insert_signal("full", "go", "1", f"k{i}", 10).outcome is Outcome.STORED

    def refuse(n: int, i: int) -> bool:
        return store.waits.reject_signal(
            "full", "go", "1", f"{n}-{i}", "PendingSignalsFull: full", 10
        )

    assert at_once(refuse) == {True: 10, False: SENDERS * EACH - 10}
    assert len(signal_rows(store, "full")) == 20  # 10 pending, 10 refused and kept


def test_a_refusal_for_a_run_that_does_not_exist_is_not_kept(store):
    """Bug: a signal for a run that never existed was kept forever."""
    assert not store.waits.reject_signal("ghost", "go", "1", None, "WorkflowNotFound: 'ghost'", 100)
    assert signal_rows(store, "ghost") == []
    store.insert_run(new_run("ghost"))  # the key stays free, the run exists now
    assert store.waits.reject_signal(
        "ghost", "go", "1", "key-1", "WorkflowAlreadyCompleted: x", 100
    )
    assert store.waits.insert_signal("ghost", "go", "1", "key-1", 10).outcome is Outcome.STORED
    assert store.waits.insert_signal("ghost", "go", "1", "key-1", 10).outcome is Outcome.DUPLICATE


def test_gc_deletes_the_signals_whose_run_is_gone(store):
    """Bug: signals kept for runs that don't exist were never deleted, by gc or anything."""
    store.insert_run(new_run("alive"))
    store.waits.insert_signal("alive", "go", "1", None, 100)
    signals = store.tables.signals
    orphan = {"namespace": store.namespace, "name": "go", "payload": "1", "error": "old"}
    with store.engine.begin() as conn:  # what earlier versions kept for runs never seen
        conn.execute(
            sa.insert(signals),
            [{**orphan, "run_id": f"ghost-{i}", "created_at": 1000.0 + i} for i in range(7)],
        )
        conn.execute(sa.insert(signals), [{**orphan, "run_id": "recent", "created_at": 5000.0}])
    assert store.waits.count_orphan_signals(cutoff=2000.0) == 7
    assert store.waits.gc_orphan_signals(cutoff=2000.0, batch=5) == 5  # a batch at a time
    assert store.waits.gc_orphan_signals(cutoff=2000.0, batch=5) == 2
    assert store.waits.gc_orphan_signals(cutoff=2000.0, batch=5) == 0
    assert len(signal_rows(store, "recent")) == 1  # newer than the cutoff: kept
    assert len(signal_rows(store, "alive")) == 1  # its run exists: never an orphan
