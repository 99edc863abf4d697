"""The async client (adelay, aapply_async, aget, astatus, asignal, aquery, acancel,
aget_handle, asend_signal) from a running event loop, against a real worker, the broker and
Postgres: each call answers as its sync twin does, none stalls the loop, aget wakes on
NOTIFY, and no connection or thread outlives the loop that used it."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError

from celery_durable import (
    Durable,
    InvalidArgument,
    WorkflowAlreadyCompleted,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowHandle,
    WorkflowNotFound,
    WorkflowStatus,
)
from celery_durable.store.db.async_connections import READERS
from celery_durable.store.db.listener import Listener
from tests.support.event_loop import LagProbe, await_until, run_apart
from tests.support.pgconns import backends_held_by, named_url
from tests.support.services import BROKER_URL, PG_URL, unique
from tests.support.waiting import wait_until

# No call may hold the loop this long (the benchmark measures the real figure).
STALL = 0.1


async def waiting(handle: WorkflowHandle) -> bool:
    return await handle.astatus() is WorkflowStatus.WAITING


def test_every_async_call_answers_without_stalling_the_loop(basic_app, shared_worker, key):
    durable = basic_app.durable

    async def client() -> LagProbe:
        async with LagProbe() as lag:
            lag.phase = "adelay"
            handle = await basic_app.booking.adelay(key, 60)
            assert isinstance(handle, WorkflowHandle) and handle.id
            await await_until(lambda: waiting(handle), 30, "the run to wait")
            lag.phase = "aget_handle"
            same = await durable.aget_handle(handle.id)
            assert same == handle and same.name == basic_app.booking.name
            lag.phase = "aget timing out"
            with pytest.raises(
                CeleryTimeoutError, match=r"did not finish within 0.2s \(status WAITING"
            ):
                await handle.aget(timeout=0.2)
            lag.phase = "asignal"
            assert await handle.asignal("approval", {"by": "alice"}, idempotency_key="a")
            assert not await handle.asignal("approval", {"by": "bob"}, idempotency_key="a")
            lag.phase = "aget"
            assert await handle.aget(timeout=30) == {"status": "confirmed", "receipt": 20}
            lag.phase = "aquery, astatus, acancel"
            assert await handle.aquery() == {"stage": "approved", "by": "alice"}
            assert await handle.astatus() is WorkflowStatus.SUCCEEDED
            with pytest.raises(WorkflowAlreadyCompleted):
                await handle.acancel("too late")

            lag.phase = "aapply_async"
            other = await basic_app.signalled_steps.aapply_async((f"{key}-2",), run_id=f"{key}-2")
            assert other.id == f"{key}-2"
            await await_until(lambda: waiting(other), 30, "the second run to wait")
            lag.phase = "asend_signal"
            assert await durable.asend_signal(other.id, "go", "via durable")
            assert await other.aget(timeout=30) == [10, "via durable", 20]

            lag.phase = "acancel"
            cancelled = await basic_app.long_sleeper.adelay(f"{key}-3")
            await await_until(lambda: waiting(cancelled), 30, "the sleeper to wait")
            assert await cancelled.acancel("changed my mind") is WorkflowStatus.CANCELLED
            with pytest.raises(WorkflowCancelled, match="changed my mind"):
                await cancelled.aget(timeout=30)
        return lag

    lag = run_apart(client())
    assert lag.ticks > 100  # it ticked all along
    stalled = f"the loop stalled {lag.worst * 1000:.0f} ms, during {lag.worst_during}"
    assert lag.worst < STALL, stalled


def test_the_async_client_raises_what_the_sync_one_raises(basic_app, shared_worker, key):
    durable, booking = basic_app.durable, basic_app.booking

    async def client() -> None:
        failed = await basic_app.permanent.adelay(key)
        with pytest.raises(WorkflowFailed) as raised:
            await failed.aget(timeout=30)
        sync = failed.get(timeout=30, propagate=False)
        assert (raised.value.error_type, str(raised.value)) == (sync.error_type, str(sync))
        assert raised.value.error_type.endswith("PermanentError")
        ghost = f"{key}-ghost"
        with pytest.raises(WorkflowNotFound, match=ghost):
            await durable.aget_handle(ghost)
        with pytest.raises(WorkflowNotFound, match=ghost):
            await WorkflowHandle(durable, ghost).aget(timeout=5)
        with pytest.raises(WorkflowNotFound, match=ghost):
            await durable.asend_signal(ghost, "approval")
        with pytest.raises(InvalidArgument, match="priority must be an integer") as bad:
            await booking.aapply_async((key, 1), run_id=f"{key}-bad", priority="high")
        with pytest.raises(InvalidArgument) as sync_bad:
            booking.apply_async((key, 1), run_id=f"{key}-bad", priority="high")
        assert str(bad.value) == str(sync_bad.value)
        assert await durable.runtime.store.aget_status(f"{key}-bad") is None
        with pytest.raises(TypeError, match="booking"):
            await booking.adelay(key)  # a missing argument, before anything is stored

    run_apart(client())


def test_aget_is_woken_by_notify_not_by_polling(basic_app, shared_worker, key, rds, monkeypatch):
    # The polling fallback and the safety read now wait longer than the timeout: only
    # NOTIFY can wake aget() in time.
    monkeypatch.setattr(Listener, "first_poll", 120.0)
    monkeypatch.setattr(Listener, "max_poll", 120.0)
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.five_steps.delay(key)
    store = basic_app.durable.runtime.store
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")

    async def client() -> list[int]:
        waiter = asyncio.ensure_future(handle.aget(timeout=60, interval=120))
        await asyncio.sleep(0.2)  # aget has read the run and waits
        assert store.async_db.listening_on_this_loop()  # LISTENing, not polling
        assert not waiter.done()
        await asyncio.get_running_loop().run_in_executor(None, rds.delete, f"block:{key}:s1")
        return await waiter

    assert run_apart(client()) == [10, 20, 30, 40, 50]


def test_no_connection_or_thread_outlives_its_loop(basic_app, shared_worker, key):
    """200 agets, one after another and all at once, on finished and unfinished runs:
    one loop's connections stay within its readers and one LISTEN connection, and none is
    left once the loop has ended."""
    name = unique("aclient-")
    app = Celery(unique("aclient-counted"), broker=BROKER_URL)
    counted = Durable(app, database_url=named_url(name))
    done = basic_app.booking.delay(f"{key}-done", 0.1)
    assert done.get(timeout=30)["status"] == "expired"
    pending = basic_app.long_sleeper.delay(f"{key}-waits")
    threads_before = threading.active_count()

    async def client() -> int:
        finished = WorkflowHandle(counted, done.id)
        waits = WorkflowHandle(counted, pending.id)
        for _ in range(100):
            assert (await finished.aget(timeout=10))["status"] == "expired"
        results = await asyncio.gather(*(finished.aget(timeout=10) for _ in range(60)))
        assert all(r["status"] == "expired" for r in results)
        timeouts = await asyncio.gather(
            *(waits.aget(timeout=0.3) for _ in range(40)), return_exceptions=True
        )
        assert all(isinstance(t, CeleryTimeoutError) for t in timeouts)
        return len(backends_held_by(os.getpid(), name))

    try:
        for _ in range(2):
            held = run_apart(client())
            assert 1 <= held <= READERS + 1  # readers and one LISTEN connection
            assert backends_held_by(os.getpid(), name) == []  # closed with the loop
        assert threading.active_count() == threads_before
    finally:
        pending.cancel()
        counted.runtime.store.dispose()


def test_aquery_waits_on_the_loop_without_opening_a_listen_connection_per_look(
    basic_app, shared_worker, key, monkeypatch
):
    """aquery(wait=) looks on client threads and waits on the loop's one LISTEN connection:
    a look opens no LISTEN connection of its own (one per look, opened and closed)."""
    app = Celery(unique("aquery-counted"), broker=BROKER_URL)
    counted = Durable(app, database_url=PG_URL)
    pending = basic_app.long_sleeper.delay(f"{key}-waits")
    db = counted.runtime.store.db
    opened: list[int] = []
    listen_connection = db.listen_connection

    def counting() -> object:
        opened.append(1)
        return listen_connection()

    monkeypatch.setattr(db, "listen_connection", counting)

    async def client() -> list[object]:
        waits = WorkflowHandle(counted, pending.id)
        looks = (waits.aquery("never-set", wait=0.3) for _ in range(12))
        return await asyncio.gather(*looks, return_exceptions=True)

    try:
        outcomes = run_apart(client())
        assert all(isinstance(o, CeleryTimeoutError) for o in outcomes), outcomes
        assert opened == []
    finally:
        pending.cancel()
        counted.runtime.store.dispose()
