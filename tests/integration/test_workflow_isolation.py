"""Workflows end to end, kept apart: namespaces and apps sharing one database never take
each other's runs, a run keeps the queue Celery routed it to, and messages no worker can
serve are refused once. A real prefork worker, Redis broker, Postgres store."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from celery import Celery

from celery_durable import Durable, WorkflowNotFound, WorkflowStatus
from tests.support.refusals import assert_refused_once
from tests.support.waiting import wait_until


def test_two_namespaces_never_see_each_others_runs(basic_app, shared_worker, key, monkeypatch):
    other_app = Celery("other", broker="memory://")
    # Same tables (settings from the environment), another namespace.
    other = Durable(other_app, namespace=basic_app.durable.config.namespace + "-b")

    @other.workflow(name="tests.apps.basic.context_probe")
    def probe(k: str) -> dict:
        return {}

    runs = other.runtime.store.tables.runs

    def their_row():  # type: ignore[no-untyped-def]
        """Every column a sweep that took namespace B's run would change."""
        with other.runtime.store.engine.connect() as conn:
            return conn.execute(
                sa.select(
                    runs.c.status, runs.c.dispatches, runs.c.due_at, runs.c.owner, runs.c.updated_at
                ).where(runs.c.namespace == other.config.namespace, runs.c.id == f"ns-{key}")
            ).one()

    try:
        # B's run is published to B's in-memory broker, which nobody reads: it stays PENDING
        # and is due again after the dispatch grace, for B's sweepers only.
        theirs = probe.apply_async(args=(f"b-{key}",), run_id=f"ns-{key}")
        with pytest.raises(WorkflowNotFound):
            basic_app.durable.get_handle(theirs.id)
        before = their_row()
        assert before.status == "PENDING" and before.dispatches == 0
        wait_until(
            lambda: before.due_at < other.runtime.store.now(),
            30,
            message="namespace B's run to be due",
        )
        # A's run of the same id, started with a countdown: only a sweep of namespace A
        # publishes it, so its result proves the worker swept while B's run was due.
        mine = basic_app.context_probe.apply_async(args=(key,), run_id=f"ns-{key}", countdown=0.5)
        assert mine.get(timeout=30)["id"] == f"ns-{key}"
        wait_until(
            lambda: f"run ns-{key} again" in shared_worker.log(),
            30,
            message="the worker's sweeper to log that it dispatched A's run",
        )
        # One more sweep of namespace A here, B's run still due: nothing of B's is published.
        published: list[tuple[str, str, str, str | None]] = []
        publish = basic_app.durable.runtime.publish

        def recording_publish(run_id: str, name: str, args: str, queue: str | None) -> None:
            published.append((run_id, name, args, queue))
            publish(run_id, name, args, queue)

        monkeypatch.setattr(basic_app.durable.runtime, "publish", recording_publish)
        basic_app.durable.runtime.sweeper.sweep_once()
        assert not [run for run in published if f'"b-{key}"' in run[2]], published
        # No sweep took B's run: a sweep that did would have counted a dispatch and moved
        # its due time (and a run is published only after a sweep took it).
        assert their_row() == before, "a sweep of namespace A took namespace B's run"
        assert theirs.status() is WorkflowStatus.PENDING
        basic_app.context_probe.apply_async(args=(key,), run_id=f"only-{key}").get(timeout=30)
        with pytest.raises(WorkflowNotFound):
            other.get_handle(f"only-{key}")
    finally:
        other.runtime.store.dispose()


def test_two_apps_on_one_database_never_dispatch_each_others_runs(basic_app, start_worker, key):
    """Bug: one app's sweeper republished another app's run to its own queue, where it was
    'Received unregistered task' and stuck; the queue column was NULL unless set."""
    from tests.apps import other

    basic_worker = start_worker("basic-only")
    handle = other.greet.apply_async(args=(key,), run_id=f"other-{key}", countdown=0.3)
    run = handle.record()
    assert run.queue == other.app.conf.task_default_queue  # resolved by Celery's routing
    store = basic_app.durable.runtime.store
    wait_until(lambda: store.get_run(handle.id).due_at < store.now(), 10, message="due")
    basic_app.durable.runtime.sweeper.sweep_once()  # what basic's worker does every poll
    assert store.get_run(handle.id).dispatches == 0  # no sweep of basic's took it
    assert store.get_run(handle.id).status == "PENDING"
    start_worker("other-app", app="tests.apps.other")
    assert handle.get(timeout=60) == f"hello {key}"
    assert "unregistered task" not in basic_worker.log()


def test_a_run_keeps_the_queue_celery_routed_it_to(basic_app, shared_worker, key):
    handle = basic_app.context_probe.apply_async(args=(key,), run_id=f"routed-{key}")
    assert handle.record().queue == basic_app.app.conf.task_default_queue
    handle.get(timeout=30)


def test_workflow_and_item_messages_no_worker_can_serve_are_refused_once(
    basic_app, shared_worker, key
):
    """Bug (issue 20): a workflow message whose task id holds NUL reached Postgres
    (psycopg.DataError, a raw traceback); so did an item message naming such a run, and
    one for a namespace no app has (LookupError) or with the wrong arguments (TypeError)."""
    ns = basic_app.durable.config.namespace
    queue = basic_app.app.conf.task_default_queue
    workflow, step = basic_app.five_steps.name, basic_app.numbered.name
    bad = {
        f"nul-{key}\x00": (workflow, (key,)),
        f"{key}-item-nul": (step, (ns, f"run-{key}\x00", 0, 0)),
        f"{key}-item-ns": (step, (f"no-such-{key}", f"run-{key}", 0, 0)),
        f"{key}-item-few": (step, (ns, f"run-{key}")),
        f"{key}-item-idx": (step, (ns, f"run-{key}", "0", 2**40)),
    }
    since = len(shared_worker.log())
    for task_id, (task, args) in bad.items():
        basic_app.app.send_task(task, args=args, queue=queue, task_id=task_id)
    tail = assert_refused_once(shared_worker, since, dict.fromkeys(bad, queue))
    assert "NUL" in tail and "no Durable serves the namespace" in tail
    runs = basic_app.durable.runtime.store.tables.runs
    with basic_app.durable.runtime.store.engine.connect() as conn:
        count = sa.select(sa.func.count()).select_from(runs).where(runs.c.id.contains(key))
        assert conn.execute(count).scalar_one() == 0  # nothing stored
