"""OpenTelemetry: each attempt is a span, each executed step a child span, a signal's
wake-up links back to its sender, and the .delay() caller's trace goes on into the run,
in-process (eager, SQLite) and across the broker (a real worker exporting to a file)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import celery_durable as cd
from celery_durable import WorkflowFailed, WorkflowStatus
from tests.conftest import GPU_QUEUE, QUEUE
from tests.support.tracefile import read_spans
from tests.support.waiting import wait_until
from tests.support.workers import ROOT, clean_env

OUTCOME = "celery_durable.outcome"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """This process's spans (the global provider can be set once per process)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()


def test_attempts_steps_and_the_signal_link_in_process(durable, exporter):
    tries = {"flaky": 0}

    @durable.step(name="t.double")
    def double(n: int) -> int:
        return 2 * n

    @durable.step(name="t.flaky", max_attempts=2)
    def flaky(n: int) -> int:
        tries["flaky"] += 1
        if tries["flaky"] == 1:
            raise ConnectionError("first try fails")
        return n

    @durable.workflow(name="t.flow")
    def flow(n: int) -> int:
        first = double(n)
        cd.wait_for_signal("go")
        return flaky(double(first))

    tracer = trace.get_tracer("test")
    exporter.clear()
    with tracer.start_as_current_span("POST /orders") as web:
        handle = flow.delay(3)
    with tracer.start_as_current_span("approve") as sender:
        handle.signal("go")
    assert handle.get(timeout=5) == 12

    spans = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time)
    first, second = [s for s in spans if s.name == "t.flow"]
    web_context, sender_context = web.get_span_context(), sender.get_span_context()
    # The caller's trace goes on into the first attempt.
    assert first.context.trace_id == web_context.trace_id
    assert first.parent.span_id == web_context.span_id
    assert first.kind is trace.SpanKind.CONSUMER
    assert first.attributes[OUTCOME] == "waiting"
    assert first.attributes["celery_durable.attempt"] == 1
    assert first.attributes["celery_durable.run_id"] == handle.id
    # The resumed attempt links back to the signal's sender.
    assert [link.context.span_id for link in second.links] == [sender_context.span_id]
    assert second.attributes[OUTCOME] == "succeeded"
    assert second.attributes["celery_durable.replayed_steps"] == 2
    # Each executed step is a child of its attempt; replayed steps get no span.
    steps = [
        (s.name, s.attributes["celery_durable.step_index"], s.parent.span_id)
        for s in spans
        if s.name in ("t.double", "t.flaky")
    ]
    assert steps == [
        ("t.double", 0, first.context.span_id),
        ("t.double", 2, second.context.span_id),
        ("t.flaky", 3, second.context.span_id),
    ]
    (flaky_span,) = [s for s in spans if s.name == "t.flaky"]
    assert [e.name for e in flaky_span.events] == ["retry"]


def test_a_failed_attempt_is_an_error_span_with_its_exception(durable, exporter):
    @durable.workflow(name="t.broken", max_attempts=1)
    def broken() -> None:
        raise cd.PermanentError("no stock")

    exporter.clear()
    handle = broken.delay()
    with pytest.raises(WorkflowFailed):
        handle.get(timeout=5)
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "t.broken"]
    assert span.attributes[OUTCOME] == "failed"
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.events[0].name == "exception" and "no stock" in str(span.events[0].attributes)


def test_without_opentelemetry_tracing_is_a_no_op(tmp_path):
    script = f"""
import sys
sys.modules["opentelemetry"] = None  # as if it were not installed
from celery import Celery
import celery_durable as cd
from celery_durable import Durable
from celery_durable.core import tracing
assert tracing.ENABLED is False
app = Celery("plain", broker="memory://")
app.conf.task_always_eager = True
durable = Durable(app, database_url="sqlite:///{tmp_path}/store.sqlite3")
durable.migrate()

@durable.step
def one() -> int:
    return 1

@durable.workflow
def flow() -> int:
    cd.wait_for_signal("go")
    return one()

handle = flow.delay()
handle.signal("go")
assert handle.get(timeout=5) == 1
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_items_and_children_continue_the_trace_and_their_wake_up_links_back(durable, exporter):
    @durable.step(name="t.square")
    def square(n: int) -> int:
        return n * n

    @durable.workflow(name="t.child")
    def child(n: int) -> int:
        return square(n)

    @durable.workflow(name="t.parent")
    def parent() -> list[int]:
        squares = cd.map(square, [1, 2])
        return [*squares, child.start_child(3).result()]

    exporter.clear()
    handle = parent.delay()
    assert handle.get(timeout=5) == [1, 4, 9]
    spans = exporter.get_finished_spans()
    attempts = [s for s in spans if s.name == "t.parent"]
    by_id = {s.context.span_id: s for s in spans}
    items = [s for s in spans if s.name == "t.square" and "celery_durable.item" in s.attributes]
    assert sorted(s.attributes["celery_durable.item"] for s in items) == [0, 1]
    # Each item's delivery is a child of the attempt that dispatched it.
    assert {by_id[s.parent.span_id].name for s in items} == {"t.parent"}
    (child_attempt,) = [s for s in spans if s.name == "t.child"]
    assert by_id[child_attempt.parent.span_id].name == "t.parent"
    # Eager mode runs the items and the child inline: the body never waits, and no
    # wake-up is sent (the real-worker test below follows one).
    assert [s.attributes[OUTCOME] for s in attempts] == ["succeeded"]


def test_the_callers_trace_crosses_the_broker_into_a_real_worker(
    basic_app, start_worker, exporter, key, tmp_path, rds
):
    path = str(tmp_path / "spans.jsonl")
    start_worker(env={"TEST_TRACE_FILE": path}, queues=f"{QUEUE},{GPU_QUEUE}")
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("POST /orders") as web:
        handle = basic_app.signalled_steps.delay(key)
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 30, message="WAITING")
    with tracer.start_as_current_span("approve") as sender:
        handle.signal("go", "payload")
    assert handle.get(timeout=30) == [10, "payload", 20]

    name = basic_app.signalled_steps.name

    def attempts() -> list[dict[str, Any]]:
        found = [s for s in read_spans(path) if s["name"] == name]
        return sorted(found, key=lambda s: s["start"]) if len(found) == 2 else []

    first, second = wait_until(attempts, 30, 0.1, lambda: f"two attempt spans: {read_spans(path)}")
    web_context, sender_context = web.get_span_context(), sender.get_span_context()
    assert first["trace_id"] == format(web_context.trace_id, "032x")
    assert first["parent_id"] == format(web_context.span_id, "016x")
    assert first["attributes"][OUTCOME] == "waiting"
    assert second["links"] == [format(sender_context.span_id, "016x")]
    assert second["attributes"][OUTCOME] == "succeeded"
    steps = {
        (s["parent_id"], s["attributes"]["celery_durable.step_index"])
        for s in read_spans(path)
        if s["name"] == "tests.apps.basic.numbered"
    }
    assert steps == {(first["span_id"], 0), (second["span_id"], 2)}
    # A map: the parent waits for its items, and the last item's record wakes it; the
    # resumed attempt links back to that item's span.
    rds.set(f"block:{key}:render", "1")
    mapped = basic_app.rendered.delay(key, 2, 0)
    wait_until(lambda: mapped.status() is WorkflowStatus.WAITING, 30, message="WAITING")
    rds.delete(f"block:{key}:render")
    assert mapped.get(timeout=30) == ["page-0", "page-1"]
    name = basic_app.rendered.name

    def map_spans() -> list[dict[str, Any]]:
        found = [s for s in read_spans(path) if s["name"] == name]
        return sorted(found, key=lambda s: s["start"]) if len(found) == 2 else []

    waited, resumed = wait_until(map_spans, 30, 0.1, lambda: f"two spans: {read_spans(path)}")
    items = [
        s
        for s in read_spans(path)
        if s["name"] == basic_app.render.name and s["trace_id"] == waited["trace_id"]
    ]
    assert len(items) == 2 and {s["parent_id"] for s in items} == {waited["span_id"]}
    assert waited["attributes"][OUTCOME] == "waiting"
    assert resumed["links"] and set(resumed["links"]) <= {s["span_id"] for s in items}
