"""The store behind a real PgBouncer (Debian's 1.18) in transaction pooling mode.

PgBouncer hands each transaction to whichever server connection is free: server-side
prepared statements, session ``SET``s and LISTEN don't survive that. ``durable_pgbouncer``
turns all three off (LISTEN becomes polling, or goes to ``durable_listen_url``).
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import psycopg
import pytest
from celery import Celery

from celery_durable import ConfigurationError, Durable, WorkflowStatus
from celery_durable.core.config import DurableConfig
from celery_durable.store import StepRecord, Store
from celery_durable.store.db.listener import Listener
from celery_durable.store.migrations import current, upgrade
from tests.conftest import QUEUE
from tests.support.builders import claimed, fan, new_run, started
from tests.support.pgbouncer import PgBouncer, pgbouncer_fixture  # noqa: F401 - `pgbouncer`
from tests.support.services import BROKER_URL, PG_URL, drop_tables, effects, unique
from tests.support.threads import run_in_threads
from tests.support.waiting import wait_until

# What goes wrong behind transaction pooling when a connection keeps session state.
SESSION_STATE_ERRORS = ("prepared statement", "unsupported startup parameter", "LISTEN")


@pytest.mark.parametrize(
    ("raw", "expected"), [("1", True), ("true", True), ("ON", True), ("0", False), ("no", False)]
)
def test_the_pgbouncer_setting_reads_booleans(raw: str, expected: bool) -> None:
    config = DurableConfig.from_sources(environ={"CELERY_DURABLE_PGBOUNCER": raw})
    assert config.pgbouncer is expected
    assert DurableConfig.from_sources(app_conf={"durable_pgbouncer": True}, environ={}).pgbouncer


def test_bad_pgbouncer_and_listen_url_settings_name_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="durable_pgbouncer"):
        DurableConfig.from_sources(environ={"CELERY_DURABLE_PGBOUNCER": "maybe"})
    with pytest.raises(ConfigurationError, match="durable_listen_url"):
        Store(PG_URL, "nothing_", "ns", pgbouncer=True, listen_url="sqlite:///x.sqlite3")


def test_the_fixture_pools_transactions(pgbouncer: PgBouncer) -> None:
    """Control: psycopg's default prepared statements break across PgBouncer's server
    connections, and a startup ``options`` (a session SET) is refused."""
    conninfo = f"host=127.0.0.1 port={pgbouncer.port} user=postgres dbname=test"
    with psycopg.connect(conninfo, autocommit=True) as first:
        for i in range(8):  # prepared on the server connection after 5 runs
            first.execute("SELECT %s::int + 1", (i,))
    with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
        with psycopg.connect(conninfo, autocommit=True) as second:  # same server connection
            for i in range(8):
                second.execute("SELECT %s::int + 1", (i,))
    with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter"):
        psycopg.connect(conninfo + " options='-c synchronous_commit=off'")


@pytest.fixture
def bounced_store(pgbouncer: PgBouncer) -> Iterator[Store]:
    prefix = unique("b")[:9] + "_"
    store = Store(pgbouncer.url, prefix, "ns", pgbouncer=True)
    upgrade(store)  # the migration goes through PgBouncer too
    yield store
    store.dispose()
    drop_tables(PG_URL, prefix)


def test_the_store_works_behind_pgbouncer(bounced_store: Store, pgbouncer: PgBouncer) -> None:

    store, mark = bounced_store, len(pgbouncer.log())
    assert current(store) == "0015"
    assert store.db.connect_args()["prepare_threshold"] is None
    record = store.db.pool.take()
    try:
        assert record.get_connection().prepare_threshold is None  # no server-side PREPARE
    finally:
        store.db.pool.give_back(record)

    def work(slot: int) -> None:  # two threads: two client connections, shuffled servers
        for i in range(slot, 40, 2):
            run_id = f"r{i}"
            store.insert_run(new_run(run_id))
            claim = store.claim_run(run_id, "me", lease=30)
            assert claim is not None
            for idx in range(3):
                step = StepRecord(idx, "s", "ok", "[[],{}]", "1", None)
                assert store.record_step(run_id, claim.fence, step).outcome.name == "RECORDED"
            assert store.renew_leases("me", [run_id], 30) == {run_id: False}
            assert store.get_run(run_id).status == "RUNNING"
            assert store.settle_run(run_id, claim.fence, "SUCCEEDED", result="1")

    errors = run_in_threads(work, 2)
    assert not errors, errors
    assert not [e for e in SESSION_STATE_ERRORS if e in pgbouncer.log(mark)], pgbouncer.log(mark)
    with store.listener() as listener:
        assert listener.conn is None  # polling: LISTEN does not work through PgBouncer


def test_an_item_runs_in_one_open_transaction_behind_pgbouncer(
    bounced_store: Store, pgbouncer: PgBouncer
) -> None:
    store, mark = bounced_store, len(pgbouncer.log())
    fence = claimed(store, "items")
    store.fanout.insert_fanout("items", fence, started(0, 2), fan(2))
    first, second = store.fanout.open_item("items", 0, 0), store.fanout.open_item("items", 0, 1)
    assert (first.verdict, second.verdict) == ("run", "run")
    assert store.fanout.open_item("items", 0, 0).verdict == "skip"  # its lock holds across servers
    assert store.fanout.suspend_on_items("items", fence, [0]).name == "SUSPENDED"
    assert first.settle("ok", "1", None, 60).woken is None
    woken = second.settle("ok", "2", None, 60).woken
    assert woken is not None and woken.id == "items"
    assert store.fanout.load_items("items", [0])[0].outputs == ["1", "2"]
    assert not [e for e in SESSION_STATE_ERRORS if e in pgbouncer.log(mark)], pgbouncer.log(mark)


def test_listen_url_keeps_listen_on_a_direct_connection(pgbouncer: PgBouncer) -> None:
    store = Store(pgbouncer.url, "nothing_", "ns", pgbouncer=True, listen_url=PG_URL)
    try:
        with store.listener() as listener:
            assert listener.conn is not None
            assert listener.conn.info.port == 5432
    finally:
        store.dispose()


@pytest.fixture
def client(pgbouncer: PgBouncer, basic_app: object) -> Iterator[SimpleNamespace]:
    """A producer of the test app's workflows whose store goes through PgBouncer."""
    app = Celery(unique("pgbouncer-client"), broker=BROKER_URL)
    app.conf.update(task_default_queue=QUEUE, broker_connection_retry_on_startup=True)
    durable = Durable(app, database_url=pgbouncer.url, pgbouncer=True)

    def five_steps(key: str) -> list[int]:
        raise NotImplementedError

    def booking(key: str, timeout: float) -> dict:
        raise NotImplementedError

    def sleeper(key: str, seconds: float) -> float:
        raise NotImplementedError

    def retried_step(key: str) -> str:
        raise NotImplementedError

    flows = {
        fn.__name__: durable.workflow(name=f"tests.apps.basic.{fn.__name__}")(fn)
        for fn in (five_steps, booking, sleeper, retried_step)
    }
    yield SimpleNamespace(durable=durable, **flows)
    durable.runtime.store.dispose()


def worker_env(pgbouncer: PgBouncer) -> dict[str, str]:
    return {"CELERY_DURABLE_DATABASE_URL": pgbouncer.url, "CELERY_DURABLE_PGBOUNCER": "true"}


def assert_no_session_state_errors(pgbouncer: PgBouncer, mark: int, *workers) -> None:  # type: ignore[no-untyped-def]
    for worker in workers:
        log = worker.log()
        assert "prepared statement" not in log and "does not exist" not in log, log
        assert "unsupported startup parameter" not in log, log
    log = pgbouncer.log(mark)
    assert not [error for error in SESSION_STATE_ERRORS if error in log], log


def test_a_worker_behind_pgbouncer_runs_steps_signals_and_timers(
    pgbouncer: PgBouncer,
    client: SimpleNamespace,
    start_worker,  # type: ignore[no-untyped-def]
    key: str,
) -> None:
    mark = len(pgbouncer.log())
    worker = start_worker("bounced", env=worker_env(pgbouncer))
    steps = [client.five_steps.delay(f"{key}-{n}") for n in range(10)]
    bookings = [client.booking.delay(f"{key}-b{n}", 60) for n in range(2)]
    sleepers = [client.sleeper.delay(f"{key}-s{n}", 0.3) for n in range(2)]
    retried = client.retried_step.delay(f"{key}-r")
    for handle in bookings:
        wait_until(lambda h=handle: h.status() is WorkflowStatus.WAITING, 60, message="wait")
        assert handle.signal("approval", {"by": "pgbouncer"})
    with client.durable.runtime.store.listener() as listener:
        assert listener.conn is None  # handle.get polls
    for handle in steps:
        assert handle.get(timeout=60) == [10, 20, 30, 40, 50]
    for handle in bookings:
        assert handle.get(timeout=60) == {"status": "confirmed", "receipt": 20}
        assert handle.query() == {"stage": "approved", "by": "pgbouncer"}
    for handle in sleepers:
        assert handle.get(timeout=60) >= 0.3
    assert retried.get(timeout=60) == "second call ok"
    assert_no_session_state_errors(pgbouncer, mark, worker)


def test_a_sigkilled_worker_behind_pgbouncer_is_recovered(
    pgbouncer: PgBouncer,
    client: SimpleNamespace,
    start_worker,  # type: ignore[no-untyped-def]
    key: str,
    rds,  # type: ignore[no-untyped-def]
) -> None:
    mark = len(pgbouncer.log())
    rds.set(f"block:{key}:s2", "1")
    doomed = start_worker("bounced-doomed", env=worker_env(pgbouncer))
    handle = client.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s2"), 60, message="step 2 to start")
    doomed.kill()  # SIGKILL, main process and children
    rds.delete(f"block:{key}:s2")
    successor = start_worker("bounced-successor", env=worker_env(pgbouncer))
    assert handle.get(timeout=60) == [10, 20, 30, 40, 50]
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1, 2, 1, 1, 1]
    assert handle.status() is WorkflowStatus.SUCCEEDED
    assert_no_session_state_errors(pgbouncer, mark, doomed, successor)


def test_listen_url_wakes_handles_behind_pgbouncer(
    pgbouncer: PgBouncer,
    basic_app: object,
    start_worker,  # type: ignore[no-untyped-def]
    key: str,
    rds,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's NOTIFY goes through PgBouncer; the waiter LISTENs on Postgres itself."""
    app = Celery(unique("pgbouncer-listener"), broker=BROKER_URL)
    app.conf.update(task_default_queue=QUEUE)
    durable = Durable(app, database_url=pgbouncer.url, pgbouncer=True, listen_url=PG_URL)

    @durable.workflow(name="tests.apps.basic.five_steps")
    def five_steps(key: str) -> list[int]:
        raise NotImplementedError

    start_worker("bounced-notify", env=worker_env(pgbouncer))
    monkeypatch.setattr(Listener, "first_poll", 120.0)  # only NOTIFY can wake get() in time
    monkeypatch.setattr(Listener, "max_poll", 120.0)
    try:
        assert five_steps.delay(key).get(timeout=30, interval=120) == [10, 20, 30, 40, 50]
    finally:
        durable.runtime.store.dispose()
