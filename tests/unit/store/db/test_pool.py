"""One pool of connections per process: what shares it, what it costs on the wire."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from celery_durable.store import StepRecord, Store
from celery_durable.store.db.pool import ProcessPool
from celery_durable.store.migrations import upgrade
from tests.support.builders import new_run
from tests.support.pgconns import client_ports, named_url
from tests.support.pgwire import trace_messages
from tests.support.services import PG_URL, drop_tables, unique
from tests.support.threads import run_in_threads
from tests.support.waiting import wait_until


@pytest.fixture
def app_name() -> str:
    return unique("cdpool")


@pytest.fixture
def store(app_name: str) -> Iterator[Store]:
    prefix = unique("p")[:9] + "_"
    store = Store(named_url(app_name), prefix, "ns")
    upgrade(store)
    yield store
    store.dispose()
    drop_tables(PG_URL, prefix)


def step(idx: int) -> StepRecord:
    return StepRecord(idx, "s", "ok", "[[],{}]", "1", None)


def sessions(app_name: str) -> int:
    return len(client_ports(app_name))


def test_writes_reads_transactions_and_the_heartbeat_share_one_connection(store, app_name):
    """A pool process's whole life on the store, one thread plus the heartbeat: one session."""
    store.insert_run(new_run("r1"))
    claim = store.claim_run("r1", "me", lease=30)  # relaxed commit, pipelined
    assert claim is not None and not claim.has_steps
    store.record_step("r1", claim.fence, step(0))
    assert store.get_run("r1").status == "RUNNING"  # a read (SQLAlchemy)
    assert store.waits.set_state("r1", claim.fence, "state", "1")
    assert store.waits.suspend_run("r1", claim.fence, step(1), "go", None).name == "SUSPENDED"
    assert (
        store.waits.insert_signal("r1", "go", "2", None, 5).outcome.name == "STORED"
    )  # a transaction
    assert store.wake_run("r1", "go", 60) is not None
    claim = store.claim_run("r1", "me", lease=30)
    assert claim is not None and claim.has_steps
    assert sorted(store.load_steps("r1")) == [0, 1]
    heartbeat = threading.Thread(target=store.renew_leases, args=("me", ["r1"], 30))
    heartbeat.start()
    heartbeat.join(10)
    assert store.settle_run("r1", claim.fence, "SUCCEEDED", result="1") == "SUCCEEDED"
    assert store.db.pool.size == 1
    assert sessions(app_name) == 1


def test_after_a_transaction_the_fast_path_autocommits_again(store):
    """The fast path shares connections with SQLAlchemy's READ COMMITTED transactions: a
    write after one must commit on its own (SQLAlchemy 2.0.0 left autocommit off)."""
    store.insert_run(new_run("a1"))
    cancelled = store.cancel_run("a1", "stop")  # a transaction
    assert (cancelled.requested, cancelled.status) == (True, "CANCELLED")
    store.insert_run(new_run("a2"))  # the fast path, on the same connection
    other = sa.create_engine(PG_URL)
    try:
        with other.connect() as conn:
            runs = store.tables.runs
            found = conn.execute(sa.select(runs.c.id).where(runs.c.id == "a2")).all()
    finally:
        other.dispose()
    assert found == [("a2",)]
    assert store.db.pool.size == 1


def test_the_heartbeat_waits_for_the_busy_connection_instead_of_opening_one(store, app_name):
    store.insert_run(new_run("h1"))
    claim = store.claim_run("h1", "me", lease=30)
    assert claim is not None
    pool = store.db.pool
    record = pool.take()  # the workflow thread is in the middle of a statement
    renewed: list[dict[str, bool]] = []
    heartbeat = threading.Thread(
        target=lambda: renewed.append(store.renew_leases("me", ["h1"], 30))
    )
    heartbeat.start()
    time.sleep(0.05)
    assert not renewed  # waiting, not connecting
    pool.give_back(record)
    heartbeat.join(10)
    assert renewed == [{"h1": False}]
    assert pool.size == 1 and sessions(app_name) == 1


def test_a_borrower_that_waited_too_long_uses_a_temporary_connection(store, app_name):
    store.insert_run(new_run("t1"))
    assert store.claim_run("t1", "me", lease=30) is not None
    pool = store.db.pool
    record = pool.take()  # held far longer than the borrow timeout
    try:
        started = time.monotonic()
        assert store.renew_leases("me", ["t1"], 30) == {"t1": False}
        assert time.monotonic() - started >= ProcessPool.borrow_timeout
    finally:
        pool.give_back(record)
    assert pool.size == 1
    wait_until(lambda: sessions(app_name) == 1, 10, message="the temporary session to close")


def test_concurrent_threads_each_get_a_connection_and_the_pool_keeps_them(store, app_name):
    for i in range(40):
        store.insert_run(new_run(f"c{i}"))
    barrier = threading.Barrier(3)

    def work(slot: int) -> None:
        barrier.wait(10)
        for i in range(slot, 40, 3):
            claim = store.claim_run(f"c{i}", "me", lease=30)
            assert claim is not None
            store.record_step(f"c{i}", claim.fence, step(0))
            store.settle_run(f"c{i}", claim.fence, "SUCCEEDED", result="1")

    errors = run_in_threads(work, 3)
    assert not errors
    assert 1 <= store.db.pool.size <= 3
    assert sessions(app_name) == store.db.pool.size


def test_the_relaxed_claim_is_one_statement_and_leaves_no_session_state(store):
    """The claim's asynchronous commit is part of the claim itself (a transaction-local
    set_config): one statement, one round trip, like the autocommit write of a step."""
    store.insert_run(new_run("w1"))
    store.claim_run("w1", "warm-up", lease=0)  # statements compiled, connection open
    messages = trace_messages(store, lambda: store.claim_run("w1", "me", lease=30))
    assert messages.count("F Execute") == 1
    assert messages.count("F Sync") == 1 and messages.count("B ReadyForQuery") == 1
    claim = store.get_run("w1")
    step_messages = trace_messages(store, lambda: store.record_step("w1", claim.fence, step(0)))
    assert step_messages.count("F Sync") == 1 and step_messages.count("B ReadyForQuery") == 1
    with store.db.read() as conn:
        assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"


def test_a_connection_the_server_dropped_is_replaced_before_use(store, app_name):
    store.insert_run(new_run("d1"))
    engine = sa.create_engine(PG_URL, connect_args={"application_name": "the-killer"})
    try:
        with engine.connect() as conn:
            killed = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = :name"
                ),
                {"name": app_name},
            ).scalar()
    finally:
        engine.dispose()
    assert killed == 1
    wait_until(lambda: sessions(app_name) == 0, 10, message="the session to end")
    # Neither the hot path (claim: not retried) nor a read sees the dead connection.
    assert store.claim_run("d1", "me", lease=30) is not None
    assert store.get_run("d1").owner == "me"
    assert store.db.pool.size == 1 and sessions(app_name) == 1


def test_a_statement_waits_for_the_connection_the_heartbeat_borrowed(store, app_name):
    """The other way round: the workflow thread needs the connection the heartbeat holds."""
    from celery_durable.store.db.pool import borrowing

    store.insert_run(new_run("b1"))
    pool = store.db.pool
    with borrowing():
        lent = pool.take()  # the heartbeat's statement is running
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(store.claim_run("b1", "me", lease=30)))
    worker.start()
    time.sleep(0.05)
    assert not done  # waiting, not connecting
    pool.give_back(lent)
    worker.join(10)
    assert done and done[0] is not None
    assert pool.size == 1 and sessions(app_name) == 1
