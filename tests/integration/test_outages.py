"""The database going away: named errors, retries until a timeout, quiet background loops,
and nothing lost (signals, deliveries) while it is gone.

Outages are real: a port where nothing listens, or a TCP proxy the test owns in front of
the session's Postgres (other sessions on that server never notice). This module never
uses the module-wide shared worker: a worker behind the proxy must be the only consumer.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError

import celery_durable as cd
from celery_durable import DatabaseUnavailable, Durable, WorkflowCancelled, WorkflowStatus
from tests.support.proxy import TcpProxy
from tests.support.services import BROKER_URL, PG_URL, delete_queues, unique
from tests.support.waiting import wait_until
from tests.support.workers import ROOT


def closed_port() -> int:
    """A port where nothing listens (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_delay_with_the_database_down_raises_database_unavailable():
    """Bug: .delay() raised a raw psycopg.OperationalError."""
    port = closed_port()
    app = Celery("db-down", broker="memory://")  # never reached: nothing is stored
    durable = Durable(
        app,
        database_url=f"postgresql+psycopg://postgres:s3cret@127.0.0.1:{port}/test",
        namespace="db-down",
    )

    @durable.workflow(name="shop.checkout")
    def checkout(order_id: int) -> int:
        return order_id

    for start, run_id in (
        (lambda: checkout.apply_async(args=(42,), run_id="order-42"), "order-42"),
        (lambda: checkout.delay(42), "[0-9a-f-]{36}"),  # a generated id, named too
    ):
        with pytest.raises(DatabaseUnavailable) as raised:
            start()
        message = str(raised.value)
        assert re.search(f"workflow shop\\.checkout run '{run_id}' was not started", message)
        assert f"the database postgresql+psycopg://postgres:***@127.0.0.1:{port}/test" in message
        assert "is unreachable" in message and "s3cret" not in message
        assert isinstance(raised.value.__cause__, psycopg.OperationalError)  # chained
        assert "Connection refused" in str(raised.value.__cause__)
    durable.runtime.store.dispose()


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    with TcpProxy.to_url(PG_URL) as forwarder:
        yield forwarder


@pytest.fixture
def via_proxy(basic_app, proxy) -> Iterator[Durable]:
    """The test app's runs (same tables and namespace), read through the proxy."""
    config = basic_app.durable.config
    durable = Durable(
        Celery("via-proxy", broker="memory://"),
        database_url=proxy.url(PG_URL),
        table_prefix=config.table_prefix,
        namespace=config.namespace,
    )
    yield durable
    durable.runtime.store.dispose()


def test_get_and_wait_retry_through_a_database_restart(basic_app, proxy, via_proxy, key):
    """Bug: handle.get()/wait() crashed on the first connection error of a restart."""
    handle = basic_app.cancellable.apply_async(args=(key,), queue=f"nobody-{key}")
    far = via_proxy.get_handle(handle.id)  # reads through the proxy
    assert far.status() is WorkflowStatus.PENDING

    def outage() -> None:
        wait_until(lambda: proxy.refused >= 2, 30, message="get() to retry during the outage")
        handle.cancel("cancelled during the outage")  # the direct connection still works
        proxy.restore()

    proxy.cut()
    restart = threading.Thread(target=outage)
    restart.start()
    with pytest.raises(WorkflowCancelled, match="cancelled during the outage"):
        far.get(timeout=60)
    restart.join()

    proxy.cut()
    restart = threading.Thread(
        target=lambda: (wait_until(lambda: proxy.refused >= 2, 30), proxy.restore())
    )
    restart.start()
    assert far.wait(timeout=60) is WorkflowStatus.CANCELLED
    restart.join()


def test_get_times_out_saying_the_database_was_unreachable(basic_app, proxy, via_proxy, key):
    far = cd.WorkflowHandle(via_proxy, f"outage-{key}")
    proxy.cut()
    started = time.monotonic()
    with pytest.raises(CeleryTimeoutError) as raised:
        far.get(timeout=1.5)
    assert 1.5 <= time.monotonic() - started < 15
    database = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/test"
    assert f"the database {database} was unreachable" in str(raised.value)
    assert f"outage-{key}" in str(raised.value) and proxy.refused >= 2


def test_handle_calls_during_an_outage_raise_database_unavailable(basic_app, proxy, via_proxy, key):
    far = cd.WorkflowHandle(via_proxy, f"outage-{key}")
    proxy.cut()
    for call in (far.status, far.record, far.query, far.cancel, lambda: far.signal("go")):
        with pytest.raises(DatabaseUnavailable, match=f"outage-{key}") as raised:
            call()
        assert "is unreachable" in str(raised.value)


def show(*args: str, database_url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.apps.basic", "durable", "show", *args],
        cwd=ROOT,
        env={**os.environ, "CELERY_DURABLE_DATABASE_URL": database_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_show_retries_while_the_database_restarts(basic_app, proxy, key):
    """Bug: `durable show` printed a traceback during a database restart."""
    handle = basic_app.cancellable.apply_async(args=(key,), queue=f"nobody-{key}")
    proxy.cut()
    command = show(handle.id, "--timeout", "60", database_url=proxy.url(PG_URL))
    try:
        wait_until(lambda: proxy.refused >= 2, 60, message="show to retry during the outage")
        proxy.restore()
        out, err = command.communicate(timeout=60)
    finally:
        command.kill()
    assert command.returncode == 0, err
    assert f"{handle.id}  tests.apps.basic.cancellable  PENDING" in out
    handle.cancel("test over")


def test_show_gives_up_after_its_timeout_with_one_clean_line(basic_app, proxy, key):
    proxy.cut()
    command = show(f"run-{key}", "--timeout", "2", database_url=proxy.url(PG_URL))
    out, err = command.communicate(timeout=60)
    assert command.returncode != 0
    assert "Traceback" not in err, err
    [line] = [text for text in err.splitlines() if text.strip()]
    database = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/test"
    assert f"cannot show workflow run 'run-{key}' (tried for 2s)" in line
    assert f"the database {database} is unreachable" in line
    assert proxy.refused >= 2


def log_lines_over(worker, seconds: float, then=None) -> list[str]:  # type: ignore[no-untyped-def]
    """What the worker logs during the next ``seconds`` (a rate: a plain sleep is right),
    counting from before ``then()`` (e.g. the cut), so nothing it causes is missed."""
    before = len(worker.log().splitlines())
    if then is not None:
        then()
    time.sleep(seconds)
    return worker.log().splitlines()[before:]


def test_a_worker_with_a_wrong_database_url_logs_one_clear_error(start_worker):
    """Bug: the sweeper logged a 100-line traceback per attempt (~40 lines a second) while
    the worker reported "ready"."""
    port = closed_port()
    url = f"postgresql+psycopg://postgres:s3cret@127.0.0.1:{port}/test"
    # A queue of its own, and a namespace (so a signal queue) of its own: a message another
    # test left, or a wake-up another test's signal sends meanwhile, would be delivered
    # again and again (the database can't tell it is done), each time a line.
    queue = unique("q-wrong-db-")
    namespace = unique("ns-")
    env = {"CELERY_DURABLE_DATABASE_URL": url, "CELERY_DURABLE_NAMESPACE": namespace}
    try:
        worker = start_worker("wrong-db", env=env, queues=queue)
        later = log_lines_over(worker, 5)
        worker.kill()  # before its queue goes: a consumer of a deleted queue logs it
    finally:
        delete_queues(BROKER_URL, [queue, f"celery_durable.signals.{namespace}"])
    assert len(later) <= 5, "\n".join(later)
    log = worker.log()
    assert "Traceback" not in log and "s3cret" not in log
    errors = [line for line in log.splitlines() if "ERROR" in line]
    hidden = f"postgresql+psycopg://postgres:***@127.0.0.1:{port}/test"
    assert f"celery_durable: the database {hidden} is unreachable" in errors[0]
    assert log.index(errors[0]) < log.index(" ready.")  # said at start, before "ready"


def test_background_loops_back_off_while_the_database_is_down(
    basic_app, start_worker, proxy, key, rds
):
    """The sweeper and the lease heartbeat log once per backoff step, then recover."""
    rds.set(f"block:{key}:s2", "1")
    worker = start_worker("outage", env={"CELERY_DURABLE_DATABASE_URL": proxy.url(PG_URL)})
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s2"), 30, message="step 2 to start")
    during = log_lines_over(worker, 5, then=proxy.cut)
    assert len(during) <= 12, "\n".join(during)
    assert "Traceback" not in "\n".join(during)
    heartbeat = [line for line in during if "lease heartbeat failed" in line]
    assert heartbeat and "(1 in a row; next try in" in heartbeat[0], during
    assert "is unreachable" in heartbeat[0]
    assert any("celery_durable sweep failed (1 in a row" in line for line in during), during
    proxy.restore()
    rds.delete(f"block:{key}:s2")
    assert handle.get(timeout=60) == [10, 20, 30, 40, 50]
    wait_until(lambda: "works again" in worker.log(), 30, message="the loops to recover")


def test_a_broker_only_signal_waits_out_a_store_outage(basic_app, start_worker, key):
    """Bug: the worker's signal task raised OperationalError, Celery acked the message and
    the signal was gone; the run waited forever."""
    with TcpProxy.to_url(PG_URL) as proxy:
        worker = start_worker(
            "signal-outage", env={"CELERY_DURABLE_DATABASE_URL": proxy.url(PG_URL)}
        )
        handle = basic_app.booking.delay(key, 600)
        wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 30, message="WAITING")
        proxy.cut()
        basic_app.durable.send_signal(handle.id, "approval", {"by": "erin"}, store_first=False)
        wait_until(
            lambda: "the store is unreachable" in worker.log(),
            30,
            message=lambda: f"the signal task to meet the outage:\n{worker.log()[-3000:]}",
        )
        assert handle.status() is WorkflowStatus.WAITING  # not stored, not lost either
        proxy.restore()
        assert handle.get(timeout=60)["status"] == "confirmed"
        assert handle.query() == {"stage": "approved", "by": "erin"}


def test_a_delivery_during_a_store_outage_is_delivered_again_not_dropped(
    basic_app, start_worker, key
):
    """Bug: a workflow message delivered while Postgres was down was acked; the run then
    waited for durable_dispatch_grace (60 s here) before a sweeper sent it again."""
    producer_app = Celery("outage-producer", broker=BROKER_URL)
    producer_app.conf.task_default_queue = basic_app.app.conf.task_default_queue
    producer = Durable(producer_app, dispatch_grace=60)

    @producer.workflow(name="tests.apps.basic.context_probe")
    def probe(k: str) -> dict:
        return {}

    with TcpProxy.to_url(PG_URL) as proxy:
        worker = start_worker(
            "claim-outage",
            env={
                "CELERY_DURABLE_DATABASE_URL": proxy.url(PG_URL),
                "CELERY_DURABLE_DISPATCH_GRACE": "60",
            },
        )
        proxy.cut()
        handle = probe.apply_async(args=(key,), run_id=f"outage-{key}")
        wait_until(
            lambda: "the database is unreachable" in worker.log(),
            30,
            message=lambda: f"the claim to meet the outage:\n{worker.log()[-3000:]}",
        )
        proxy.restore()
        # Well before the 60 s dispatch grace: the delivery itself came back.
        assert handle.get(timeout=30)["id"] == f"outage-{key}"
        record = handle.record()
        assert record.dispatches == 0 and record.attempts == 1
    producer.runtime.store.dispose()
