"""Issue 41, points 1 and 10: what reaches a prefork worker's pool.

A 1 KB argument nested 500 levels deep killed every prefork worker (its main process
pickles the arguments for the pool and died of a RecursionError; the message, put back,
killed the next), and a pickled message on the signal queue ran code as it was read. Here
one real worker (an app that accepts pickle) takes each of them, and must still be the
same living process, running workflows, at the end of each test.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kombu import Connection, Exchange, Queue

import celery_durable as cd
from celery_durable import NotSerialisable
from celery_durable.waits.signals import SIGNAL_TASK
from tests.apps import guarded
from tests.apps.guarded import nested
from tests.conftest import NAMESPACE, QUEUE
from tests.support.eager import eager_durable, failure_of
from tests.support.refusals import assert_refused_once
from tests.support.services import BROKER_URL, queue_length, unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker

SETTING = "durable_max_payload_depth"
DEEP = 500  # killed the worker; 350 did not


@pytest.fixture(scope="module")
def worker(basic_app: Any) -> Iterator[Worker]:
    """One worker of the session's queue and signal queue, accepting pickle, for the module."""
    # C_FORCE_ROOT: Celery refuses to run a pickle-accepting worker as root (this machine's
    # tests run as root).
    env = {"TEST_ACCEPT_PICKLE": "1", "C_FORCE_ROOT": "1"}
    started = Worker("tests.apps.guarded", env, queues=QUEUE, name=unique("guard-"))
    try:
        yield started.wait_ready()
    finally:
        started.kill()


def assert_alive_and_working(worker: Worker, pid: int) -> None:
    """The same main process lives, and runs a workflow to its end."""
    assert worker.proc.pid == pid and worker.proc.poll() is None, worker.log()[-3000:]
    os.kill(pid, 0)
    assert guarded.echo.delay({"fine": [1, [2]]}).get(timeout=60) == {"fine": [1, [2]]}
    log = worker.log()
    assert "Unrecoverable error" not in log and "RecursionError" not in log, log[-3000:]


def publish_raw(
    queue: str, body: bytes, content_type: str, headers: dict[str, Any], **properties: Any
) -> None:
    """Put a message straight onto ``queue`` with kombu, as any client of the broker could."""
    exchange = Exchange(queue, "direct")
    with Connection(BROKER_URL) as conn:
        conn.Producer().publish(
            body,
            exchange=exchange,
            routing_key=queue,
            headers=headers,
            content_type=content_type,
            content_encoding="binary" if "pickle" in content_type else "utf-8",
            declare=[Queue(queue, exchange, routing_key=queue)],
            **properties,
        )


def task_headers(task: str, task_id: str) -> dict[str, Any]:
    """Celery's protocol 2 headers of a message for ``task``."""
    return {"lang": "py", "task": task, "id": task_id, "root_id": task_id, "retries": 0}


def refusal_line(worker: Worker, message_id: str) -> str:
    """The one line of the worker's log that refused ``message_id``."""

    def refused() -> list[str] | None:
        lines = [line for line in worker.log().splitlines() if repr(message_id) in line]
        return lines or None

    lines = wait_until(refused, 60, 0.1, lambda: f"{message_id} refused:\n{worker.log()}")
    assert len(lines) == 1 and "refused message" in lines[0], lines
    return lines[0]


def test_starts_nested_too_deeply_are_refused_before_anything_is_stored(basic_app, key):
    """Bug: ``echo.apply_async(args=(json.loads("[" * 500 + "]" * 500),))`` was stored
    PENDING, and its message killed every worker that took it."""
    run_id = f"deep-{key}"
    with pytest.raises(NotSerialisable) as refused:
        guarded.echo.apply_async(args=(nested(DEEP),), run_id=run_id)
    assert str(refused.value) == (
        f"argument 'value' of workflow tests.guarded.echo is nested {DEEP} levels deep, over "
        f"the limit of 100 ({SETTING}); nothing was stored"
    )
    with pytest.raises(NotSerialisable, match=f"argument 'value' .* nested 101 levels.*{SETTING}"):
        guarded.echo.delay(value=nested(101))
    assert basic_app.durable.runtime.store.get_run(run_id) is None


def test_every_entry_of_a_value_takes_the_configured_limit(basic_app):
    """In-process (eager), a limit of 5: children, map items, signals, state, step inputs
    and results and the workflow's result are refused naming the owner and the depth."""
    prefix = basic_app.durable.config.table_prefix
    with eager_durable("depth", prefix, max_payload_depth=5) as small:

        @small.step(name="d.echo")
        def step_echo(value: Any) -> Any:
            return value

        @small.step(name="d.grow")
        def grow() -> Any:
            return nested(6)

        @small.workflow(name="d.child")
        def child(value: Any) -> Any:
            return value

        @small.workflow(name="d.parent", max_attempts=2)
        def parent(case: str) -> Any:
            if case == "child":
                return child.start_child(nested(6)).result()
            if case == "item":
                return cd.map(step_echo, [[1], nested(6)])
            if case == "state":
                cd.set_state(nested(6))
            if case == "input":
                return step_echo(nested(6))
            if case == "output":
                return grow()
            if case == "result":
                return nested(6)
            return cd.wait_for_signal("go", timeout=60)

        cases = {
            "child": "argument 'value' of workflow d.child is nested 6 levels deep",
            "item": "argument 'value' of step d.echo is nested 6 levels deep",
            "state": "set_state('state') in workflow run",
            "input": "argument 'value' of step d.echo is nested 6 levels deep",
            "output": "the return value of step d.grow is nested 6 levels deep",
            "result": "the return value of workflow d.parent is nested 6 levels deep",
        }
        for case, owner in cases.items():
            failed = failure_of(parent.delay(case))
            assert failed.error_type == "celery_durable.errors.NotSerialisable", failed
            message = failed.error_message
            assert owner in message and f"over the limit of 5 ({SETTING})" in message, message
        waiting = parent.delay("signal")
        with pytest.raises(NotSerialisable, match="payload of signal 'go' is nested 6 levels"):
            waiting.signal("go", nested(6))
        waiting.signal("go", nested(5))
        assert waiting.get(timeout=10) == nested(5)


def test_a_start_by_name_nested_too_deeply_fails_its_run_and_the_worker_lives(
    worker, basic_app, key
):
    """``send_task`` (or ``celery call``) with the 1 KB argument: the main process takes
    the arguments out before the pool, and the run is stored FAILED naming the depth."""
    pid = worker.proc.pid
    run_id = f"by-name-{key}"
    basic_app.app.send_task("tests.guarded.echo", args=(nested(DEEP),), task_id=run_id, queue=QUEUE)
    store = basic_app.durable.runtime.store
    run = wait_until(
        lambda: (found := store.get_run(run_id)) and found.status == "FAILED" and found,
        60,
        0.1,
        lambda: f"run {run_id} failed:\n{worker.log()[-3000:]}",
    )
    assert "ArgumentsRefused" in run.error, run.error
    assert f"argument #0 is nested {DEEP} levels deep, over the limit of 100 ({SETTING})" in (
        run.error
    )
    assert queue_length(BROKER_URL, QUEUE) == 0  # acknowledged, not put back
    assert_alive_and_working(worker, pid)


def test_a_map_item_nested_too_deeply_fails_the_run_and_stores_no_item(worker, basic_app):
    pid = worker.proc.pid
    handle = guarded.deep_item.delay(DEEP)
    with pytest.raises(cd.WorkflowFailed) as raised:
        handle.get(timeout=60)
    failed = raised.value
    assert failed.error_type == "celery_durable.errors.NotSerialisable", failed
    assert (
        f"argument 'value' of step tests.guarded.depth_of is nested {DEEP} levels deep"
        in failed.error_message
    )
    items = basic_app.durable.runtime.store.tables.items
    with basic_app.durable.runtime.store.engine.connect() as conn:
        stored = conn.execute(sa.select(items.c.item).where(items.c.run_id == handle.id)).all()
    assert stored == []
    assert_alive_and_working(worker, pid)


def test_raw_messages_nested_too_deeply_on_the_signal_queue_are_refused_once(
    worker, basic_app, key
):
    """Bug: such a message killed every worker of the namespace, whatever their -Q."""
    pid = worker.proc.pid
    queue = cd_signal_queue()
    deep_args = f"deep-args-{key}"
    body = (
        b'[["'
        + NAMESPACE.encode()
        + b'","run-'
        + key.encode()
        + b'","go",'
        + b"[" * DEEP
        + b"]" * DEEP
        + b',null],{},{"callbacks":null,"errbacks":null,'
        b'"chain":null,"chord":null}]'
    )
    publish_raw(queue, body, "application/json", task_headers(SIGNAL_TASK, deep_args))
    line = refusal_line(worker, deep_args)
    assert f"argument #3 is nested {DEEP} levels deep, over the limit of 100 ({SETTING})" in line
    assert f"queue {queue!r}" in line and "acknowledged, not run" in line
    # A payload as the signal task takes it (JSON text) but nested too deeply: the signal
    # task refuses it by name, once, and keeps none of it.
    deep_text = f"deep-text-{key}"
    since = len(worker.log())
    basic_app.app.send_task(
        SIGNAL_TASK,
        args=(NAMESPACE, f"run-{key}", "go", "[" * DEEP + "]" * DEEP),
        queue=queue,
        task_id=deep_text,
    )
    tail = assert_refused_once(worker, since, {deep_text: queue})
    assert f"the payload is nested {DEEP} levels deep, over the limit of 100 ({SETTING})" in tail
    signals = basic_app.durable.runtime.store.tables.signals
    with basic_app.durable.runtime.store.engine.connect() as conn:
        kept = conn.execute(sa.select(signals.c.id).where(signals.c.run_id == f"run-{key}")).all()
    assert kept == []
    assert queue_length(BROKER_URL, queue) == 0
    assert_alive_and_working(worker, pid)


def cd_signal_queue() -> str:
    from celery_durable.core.config import default_signal_queue

    return default_signal_queue(NAMESPACE)


class WritesMarker:
    """Unpickling this creates ``path``: the code an attacker's message would run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def test_pickled_messages_to_the_librarys_queues_and_tasks_are_refused_unread(
    worker, key, tmp_path
):
    """Bug: with pickle in accept_content, a message on the signal queue ran code as the
    worker read it, before any of the library's checks. Protocol 2 (a task header) and
    protocol 1 (none) on the signal queue, and a workflow's own task on its queue."""
    pid = worker.proc.pid
    markers = {name: tmp_path / name for name in ("signal-v2", "signal-v1", "workflow")}
    sent = {name: f"{name}-{key}" for name in markers}
    signal_queue = cd_signal_queue()
    pickled = "application/x-python-serialize"
    publish_raw(
        signal_queue,
        pickle.dumps(([WritesMarker(markers["signal-v2"])], {}, {})),
        pickled,
        task_headers(SIGNAL_TASK, sent["signal-v2"]),
    )
    v1 = {
        "task": SIGNAL_TASK,
        "id": sent["signal-v1"],
        "args": [WritesMarker(markers["signal-v1"])],
    }
    publish_raw(signal_queue, pickle.dumps(v1), pickled, {}, correlation_id=sent["signal-v1"])
    publish_raw(
        QUEUE,
        pickle.dumps(([WritesMarker(markers["workflow"])], {}, {})),
        pickled,
        task_headers("tests.guarded.echo", sent["workflow"]),
    )
    for name, message_id in sent.items():
        # Whichever comes first: the code ran (the bug), or the message was refused.
        wait_until(
            lambda: markers[name].exists() or repr(message_id) in worker.log(),  # noqa: B023
            60,
            0.1,
            lambda: f"{message_id} read or refused:\n{worker.log()[-3000:]}",  # noqa: B023
        )
        assert not markers[name].exists(), f"reading message {name} ran its code"
        line = refusal_line(worker, message_id)
        assert f"its content type is {pickled!r}" in line and "JSON only" in line, line
    assert queue_length(BROKER_URL, signal_queue) == 0
    assert worker.log().count("accept_content includes pickle") == 1  # the start's warning
    assert_alive_and_working(worker, pid)
    assert not any(marker.exists() for marker in markers.values())
