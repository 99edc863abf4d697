"""A run of a workflow that no running worker has registered: `durable show` says so, and
a worker that registers it takes it as it starts, not a dispatch grace later; a worker
that discards its message counts a dispatch and leaves its due time alone."""

from __future__ import annotations

import json

import sqlalchemy as sa
from celery import Celery

from celery_durable import Durable, WorkflowStatus
from tests.conftest import QUEUE
from tests.support.cli import celery
from tests.support.services import BROKER_URL
from tests.support.waiting import wait_until

UNANNOUNCED = "no worker has announced this workflow yet"


def test_a_run_no_worker_announces_is_said_then_taken_at_once(basic_app, start_worker, key):
    """Bug: the run sat PENDING with nothing said; once a worker with the workflow
    started, it waited for the dispatch grace (60 s here) before a sweeper sent it."""
    producer_app = Celery("unannounced-producer", broker=BROKER_URL)
    producer_app.conf.task_default_queue = QUEUE
    producer = Durable(producer_app, dispatch_grace=60)

    @producer.workflow(name=basic_app.five_steps.name)
    def five_steps(k: str) -> list[int]:
        raise AssertionError("runs on the workers")

    try:
        # A worker of another app on the same queue, tables and namespace: it has not
        # registered five_steps, so Celery discards the run's message.
        stranger = start_worker("stranger", app="tests.apps.other", queues=QUEUE)
        handle = five_steps.delay(key)
        wait_until(
            lambda: "has not registered the workflow" in stranger.log(),
            30,
            message=lambda: stranger.log()[-3000:],
        )
        # The discard counts as a dispatch nobody claimed, and the run keeps its due time:
        # made due at once, a worker that has the workflow and one that doesn't (on the
        # run's queue) would pass it round every sweep, to NeverClaimed in seconds.
        store = basic_app.durable.runtime.store
        runs = store.tables.runs
        with store.engine.connect() as conn:
            query = sa.select(runs.c.dispatches, runs.c.due_at).where(runs.c.id == handle.id)
            dispatches, due_at = conn.execute(query).one()
        assert dispatches == 1
        assert due_at > store.now() + 30, (due_at, store.now())
        shown = celery("durable", "show", handle.id)
        assert shown.returncode == 0, shown.stderr
        assert f"{UNANNOUNCED}: start a worker whose app imports {five_steps.name}" in shown.stdout
        as_json = json.loads(celery("durable", "show", handle.id, "--json").stdout)
        assert as_json["unannounced"].startswith(UNANNOUNCED)
        page = basic_app.durable.dashboard_app().test_client().get(f"/run/{handle.id}")
        assert UNANNOUNCED in page.get_data(as_text=True)
        assert handle.status() is WorkflowStatus.PENDING
        stranger.kill()
        start_worker("announcer")
        # Well within the 60 s grace: the new worker's first sweep publishes it.
        assert handle.get(timeout=30) == [10, 20, 30, 40, 50]
        shown = celery("durable", "show", handle.id)
        assert UNANNOUNCED not in shown.stdout
    finally:
        producer.runtime.store.dispose()
