"""durable_max_payload_bytes: arguments, results, signal payloads and state values over
the limit are refused at the edge, naming them, their size and the setting, and nothing
is written. In eager mode on the session's Postgres tables, and a real worker for what
arrives through the broker; the limit is a few KB here instead of the 16 MiB default."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import celery_durable as cd
from celery_durable import Durable, PayloadTooLarge
from celery_durable.core.config import DurableConfig
from tests.support.eager import eager_durable, failure_of
from tests.support.refusals import assert_refused_once
from tests.support.services import unique
from tests.support.waiting import wait_until

LIMIT = 4096
SETTING = "durable_max_payload_bytes"
# 1,100 characters but 4,400 bytes in UTF-8: the limit counts bytes.
EMOJI = "\N{GRINNING FACE}" * 1100


def test_the_default_limit_is_16_mib_and_the_setting_is_read_like_the_others():
    assert DurableConfig.from_sources(environ={}).max_payload_bytes == 16 * 1024 * 1024
    env = {"CELERY_DURABLE_MAX_PAYLOAD_BYTES": "8192"}
    assert DurableConfig.from_sources(environ=env).max_payload_bytes == 8192
    conf = {"durable_max_payload_bytes": 5000}
    assert DurableConfig.from_sources(app_conf=conf, environ={}).max_payload_bytes == 5000
    with pytest.raises(cd.ConfigurationError, match="durable_max_payload_bytes"):
        DurableConfig.from_sources({"max_payload_bytes": "lots"}, environ={})


@pytest.fixture
def small(basic_app) -> Iterator[Durable]:
    """A Durable running workflows in-process (eager) with a 4 KB payload limit."""
    prefix = basic_app.durable.config.table_prefix
    with eager_durable("payload", prefix, max_payload_bytes=LIMIT) as durable:
        yield durable


def rows(durable: Durable, table: str, run_id: str | None = None) -> list[Any]:
    store = durable.runtime.store
    found = getattr(store.tables, table)
    query = sa.select(found).where(found.c.namespace == store.namespace)
    if run_id is not None:
        query = query.where((found.c.id if table == "runs" else found.c.run_id) == run_id)
    with store.engine.connect() as conn:
        return list(conn.execute(query).all())


def test_start_arguments_over_the_limit_are_refused_naming_the_argument(small):
    """Bug: a 10 MB argument was stored whole, twice (the run and its step input)."""

    @small.workflow(name="p.start")
    def start(label: str, blob: str) -> int:
        return len(blob)

    with pytest.raises(PayloadTooLarge, match="argument 'blob' of workflow p.start is 5002 bytes"):
        start.delay("a", "x" * 5000)
    with pytest.raises(PayloadTooLarge, match=f"argument 'blob' .* 4402 bytes .*{SETTING}"):
        start.apply_async(args=("a",), kwargs={"blob": EMOJI})
    assert rows(small, "runs") == []  # nothing written
    assert start.delay("a", "x" * 3000).get(timeout=10) == 3000  # under the limit: fine


def test_step_inputs_results_state_and_the_return_value_over_the_limit_fail_the_run(small):
    """Over the limit inside a run: the run fails at once (a PermanentError, like a value
    JSON can't hold: running it again would make the same payload), naming what was too
    large, and the payload is stored nowhere."""

    @small.step(name="p.echo", max_attempts=3)
    def echo(text: str) -> str:
        return text

    @small.step(name="p.grow", max_attempts=3)
    def grow(size: int) -> str:
        return "y" * size

    @small.workflow(name="p.input", max_attempts=3)
    def step_input() -> str:
        return echo("x" * 5000)

    @small.workflow(name="p.output", max_attempts=3)
    def step_output() -> str:
        return grow(5000)

    @small.workflow(name="p.state", max_attempts=3)
    def state() -> None:
        cd.set_state({"big": "z" * 5000})

    @small.workflow(name="p.result", max_attempts=3)
    def result() -> str:
        return grow(3000) + grow(3000)  # each step fits, the result does not

    cases = [
        (step_input, "argument 'text' of step p.echo is 5002 bytes"),
        (step_output, "the return value of step p.grow is 5002 bytes"),
        (state, "set_state('state') in workflow run"),
        (result, "the return value of workflow p.result is 6002 bytes"),
    ]
    for workflow, owner in cases:
        handle = workflow.delay()
        failed = failure_of(handle)
        assert failed.error_type == "celery_durable.errors.PayloadTooLarge", failed
        assert owner in failed.error_message and SETTING in failed.error_message, failed
        assert handle.record().attempts == 1  # permanent: not retried
        stored = [r.input for r in rows(small, "steps", handle.id)]
        stored += [r.output or "" for r in rows(small, "steps", handle.id)]
        stored += [r.value for r in rows(small, "state", handle.id)]
        assert all(len(text) < LIMIT for text in stored), (owner, [len(t) for t in stored])


def test_child_and_item_arguments_over_the_limit_are_refused_before_they_are_stored(small):
    @small.step(name="p.size")
    def size(text: str) -> int:
        return len(text)

    @small.workflow(name="p.child")
    def child(text: str) -> int:
        return len(text)

    @small.workflow(name="p.parent", max_attempts=3)
    def parent() -> int:
        return child.start_child("x" * 5000).result()  # type: ignore[no-any-return]

    @small.workflow(name="p.items", max_attempts=3)
    def items() -> list[int]:
        return cd.map(size, ["small", "x" * 5000])

    cases = [
        (parent, "argument 'text' of workflow p.child"),
        (items, "argument 'text' of step p.size"),
    ]
    for workflow, owner in cases:
        handle = workflow.delay()
        failed = failure_of(handle)
        assert failed.error_type == "celery_durable.errors.PayloadTooLarge", failed
        assert owner in failed.error_message and "5002 bytes" in failed.error_message
        assert handle.record().attempts == 1
        assert rows(small, "runs", f"{handle.id}:0") == []  # no child run
        assert rows(small, "items", handle.id) == []  # no item, not even the small one


def test_signal_payloads_over_the_limit_are_refused_and_not_stored(small):
    @small.workflow(name="p.waits")
    def waits() -> Any:
        return cd.wait_for_signal("go", timeout=60)

    handle = waits.apply_async(queue=unique("nobody-"))  # eager: runs at once, waits
    with pytest.raises(PayloadTooLarge, match=f"payload of signal 'go' is 5008 bytes.*{SETTING}"):
        handle.signal("go", {"b": "x" * 5000})
    with pytest.raises(PayloadTooLarge, match="payload of signal 'go'"):
        small.send_signal(handle.id, "go", ["x" * 5000])
    assert rows(small, "signals", handle.id) == []
    handle.signal("go", {"b": "small"})
    assert handle.get(timeout=10) == {"b": "small"}


def test_a_raw_signal_message_over_the_workers_limit_is_refused_once(basic_app, start_worker, key):
    """Through the broker: a worker with a 4 KB limit (and a namespace of its own, so no
    other worker takes its signal queue) refuses an oversized payload by name, and keeps
    nothing: before, it stored it (here as a refused signal of a run it can't find). A
    malformed one (not JSON) for a run that exists was kept whole as a refused signal,
    past the limit: now it is refused and kept nowhere either."""
    from celery_durable.core.config import default_signal_queue
    from celery_durable.store import Store
    from celery_durable.waits.signals import SIGNAL_TASK
    from tests.support.builders import new_run

    namespace = unique("ns-limit-")
    env = {"CELERY_DURABLE_MAX_PAYLOAD_BYTES": str(LIMIT), "CELERY_DURABLE_NAMESPACE": namespace}
    workflows = unique("q-limit-")
    worker = start_worker("limit", env=env, queues=workflows)
    queue = default_signal_queue(namespace)
    run_id = f"run-{key}"
    config = basic_app.durable.config
    store = Store(config.database_url, config.table_prefix, namespace)
    store.insert_run(new_run(run_id, grace=3600))  # the malformed one's run exists
    payload = '{"b":"' + "x" * 5000 + '"}'
    messages = {f"big-{key}": payload, f"bad-{key}": "{not json " + "x" * 5000}
    for task_id, text in messages.items():
        basic_app.app.send_task(
            SIGNAL_TASK, args=(namespace, run_id, "go", text), queue=queue, task_id=task_id
        )
    tail = assert_refused_once(worker, 0, dict.fromkeys(messages, queue))
    assert f"payload is 5008 bytes of JSON, over the limit of {LIMIT} bytes ({SETTING})" in tail
    assert f"its 5010 bytes are over {LIMIT} ({SETTING})" in tail
    assert "acknowledged and dropped" in tail and "kept in the signals table" not in tail
    signals = store.tables.signals
    with store.engine.connect() as conn:
        held = conn.execute(sa.select(signals.c.id).where(signals.c.run_id == run_id)).all()
    assert held == []
    # A start by name (send_task, celery call) over the limit: the run is stored FAILED
    # for the operator, its arguments are not (the error says nothing was stored).
    started = basic_app.app.send_task(
        basic_app.five_steps.name, args=["x" * 5000], queue=workflows, task_id=f"wf-{key}"
    )
    run = wait_until(
        lambda: (found := store.get_run(started.id)) and found.status == "FAILED" and found,
        60,
        message="the run started by name to fail",
    )
    store.dispose()
    assert SETTING in run.error and "nothing was stored" in run.error, run.error
    assert len(run.args) < LIMIT and f"over the limit of {LIMIT} bytes ({SETTING})" in run.args
