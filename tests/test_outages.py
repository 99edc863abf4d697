"""Database outages: the worker's connections go through a proxy the test owns, which it
cuts (every connection reset, new ones refused) and restores. Nothing may be lost.

This module never uses the module-wide shared worker: the only worker consuming the
session's queues is the one behind the proxy.
"""

from __future__ import annotations

from celery import Celery

from celery_durable import Durable, WorkflowStatus
from tests.support.proxy import TcpProxy
from tests.support.services import BROKER_URL, PG_URL
from tests.support.waiting import wait_until


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
        handle = probe.apply_async(args=(key,), workflow_id=f"outage-{key}")
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
    producer.store.dispose()
