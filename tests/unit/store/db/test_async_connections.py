"""The store's asyncio side (store/db/async_connections.py): reads through psycopg's
AsyncConnection give what the sync reads give, a waiter wakes on its run's NOTIFY, a
lost connection is replaced, and without LISTEN (PgBouncer, SQLite) a waiter polls."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from celery_durable.store import Store
from celery_durable.store.db.async_connections import READERS
from celery_durable.store.migrations import upgrade
from tests.support.builders import new_run
from tests.support.event_loop import run_apart
from tests.support.pgconns import backends_held_by, named_url
from tests.support.services import PG_URL, drop_tables, unique


@pytest.fixture
def app_name() -> str:
    return unique("cdasync")


@pytest.fixture
def store(app_name: str) -> Iterator[Store]:
    prefix = unique("a")[:9] + "_"
    store = Store(named_url(app_name), prefix, "ns")
    upgrade(store)
    yield store
    store.dispose()
    drop_tables(PG_URL, prefix)


def terminate(backend_pid: int) -> None:
    with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))


def test_async_reads_give_what_the_sync_reads_give(store):
    store.insert_run(new_run("r1", name="shop.checkout", args='[[42],{"vip":true}]'))
    store.claim_run("r1", "me", lease=30)

    async def reads() -> None:
        assert await store.aget_run("r1") == store.get_run("r1")
        assert await store.aget_status("r1") == store.get_status("r1") == "RUNNING"
        assert await store.aget_run("missing") is None
        assert await store.aget_status("missing") is None

    run_apart(reads())


def test_a_waiter_wakes_on_its_runs_notify_and_a_lost_listen_is_replaced(store):
    store.insert_run(new_run("r1"))

    async def waiter() -> None:
        async with store.watching("r1") as changes:
            assert changes.notified
            loop = asyncio.get_running_loop()
            # Another process's NOTIFY for the run (what settling it sends).
            loop.call_later(0.1, store.notify_finished, "r1")
            await changes.wait(60)  # 60 s if nothing woke it: the test's timeout says
            here = store.async_db._loops[loop]
            terminate(here.listen_conn.info.backend_pid)
            await changes.wait(60)  # the loss wakes every waiter: it reads the run again
            while not changes.notified:  # polling meanwhile, LISTENing again soon
                await changes.wait(0.05)
            loop.call_later(0.1, store.notify_finished, "r1")
            await changes.wait(60)

    run_apart(asyncio.wait_for(waiter(), 30))


def test_a_dead_reader_is_replaced_and_the_loop_keeps_a_few(store, app_name):
    store.insert_run(new_run("r1"))

    async def reads() -> int:
        here = None
        for _ in range(2):
            assert await store.aget_status("r1") == "PENDING"
            here = store.async_db._loops[asyncio.get_running_loop()]
            for conn in here.idle:
                terminate(conn.info.backend_pid)
        statuses = await asyncio.gather(*(store.aget_status("r1") for _ in range(50)))
        assert set(statuses) == {"PENDING"}
        assert here is not None
        return len(here.idle)

    synchronous = backends_held_by(os.getpid(), app_name)  # the sync pool's
    readers = run_apart(reads())
    assert 1 <= readers <= READERS
    assert backends_held_by(os.getpid(), app_name) == synchronous  # closed with the loop


def test_without_listen_a_waiter_polls(tmp_path: Path):
    prefix = unique("b")[:9] + "_"
    bounced = Store(PG_URL, prefix, "ns", pgbouncer=True)
    on_sqlite = Store(f"sqlite:///{tmp_path}/store.sqlite3", "d_", "ns")
    upgrade(bounced)
    upgrade(on_sqlite)
    try:
        for store in (bounced, on_sqlite):
            store.insert_run(new_run("r1"))

            async def poll(store: Store = store) -> None:
                async with store.watching("r1") as changes:
                    assert not changes.notified
                    await changes.wait(0.01)
                assert await store.aget_status("r1") == "PENDING"
                assert await store.aget_run("r1") == store.get_run("r1")

            run_apart(poll())
    finally:
        bounced.dispose()
        on_sqlite.dispose()
        drop_tables(PG_URL, prefix)
