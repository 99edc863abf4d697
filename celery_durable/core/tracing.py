"""OpenTelemetry spans of workflow runs, when ``opentelemetry-api`` is installed (the
``tracing`` extra); without it every function here is a no-op costing one ``is None`` test,
and while no SDK's tracer provider is set no span is made (the API's would record nothing).

- Each delivery of a run (an attempt, a resumption after a wait, a duplicate) is a span
  named after the workflow (kind CONSUMER), with ``celery_durable.*`` attributes: the
  run id (``run_id``, and ``workflow_id``, its older name, for one release), the attempt,
  the steps replayed and the ``outcome`` (``succeeded``, ``failed``, ``retrying``,
  ``waiting``, ``cancelled``, ``not_run``).
- Each step the attempt executes is a child span named after the step (replayed steps
  cost nothing and get none); a retry inside the step is an event on it.
- Each delivery of an item task (``cd.map``, ``step.start``, a routed step) is a span
  named after the step, a child of the span that dispatched it; a child workflow's first
  attempt is a child of the span that started it.
- ``.delay()`` puts the caller's trace context in the message headers (W3C
  ``traceparent``): the first attempt's span is a child of the caller's span, so a web
  request's trace goes on into the workflow.
- A wake-up carries its sender's context: the resumed attempt's span links back to the
  span of the signal's sender, of the child that finished, or of the last item recorded.

Example::

    with tracer.start_as_current_span("POST /checkout"):
        checkout.delay(42)          # the first attempt's span is a child of this one
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

from celery.exceptions import Ignore, Retry

try:  # the tracing extra: absent, everything below is a no-op
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - exercised by a subprocess test without it
    trace = None  # type: ignore[assignment]

ENABLED = trace is not None
# Message headers: the starter's context (the first attempt's parent) and the context of
# whoever woke the run (a link of the resumed attempt).
PARENT_HEADER = "durable_trace"
LINK_HEADER = "durable_trace_link"
OUTCOME = "celery_durable.outcome"
_NOOP = nullcontext()


def _recording() -> bool:
    """Whether spans record anything: an SDK's tracer provider is set. Without one, the
    API's spans are no-ops that still cost a delivery and each step ~10-30 us."""
    return trace is not None and not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    )


def _tracer() -> Any:
    return trace.get_tracer("celery_durable")


def _carrier() -> dict[str, str] | None:
    """The current trace context as W3C headers, or None outside any span."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


def add_start_headers(options: dict[str, Any]) -> None:
    """Put the caller's trace context in a start's publish options (``headers``): the
    first attempt's parent."""
    _add_headers(options, PARENT_HEADER)


def add_link_headers(options: dict[str, Any]) -> None:
    """Put the current trace context in the publish options of a message that wakes a
    run: the resumed attempt links to it."""
    _add_headers(options, LINK_HEADER)


def _add_headers(options: dict[str, Any], name: str) -> None:
    if trace is None:
        return
    carrier = _carrier()
    if carrier is not None:
        options["headers"] = {**(options.get("headers") or {}), name: carrier}


def carried(request: Any) -> dict[str, Any]:
    """The trace headers of an incoming delivery, to copy into a republished message."""
    if trace is None:
        return {}
    return {k: v for k in (PARENT_HEADER, LINK_HEADER) if (v := _header(request, k))}


def _header(request: Any, name: str) -> Any:
    headers = getattr(request, "headers", None) or {}
    return headers.get(name, getattr(request, name, None))


def _context_of(carrier: Any) -> Any:
    return propagate.extract(carrier) if isinstance(carrier, Mapping) else None


def delivery(workflow: str, request: Any) -> Any:
    """The span of one delivery of a run; its outcome comes from how the delivery ends."""
    run_id = str(request.id)
    attributes = {
        "celery_durable.run_id": run_id,
        "celery_durable.workflow_id": run_id,  # its older name, for one release
        "celery_durable.workflow": workflow,
    }
    return _delivery(workflow, request, attributes)


def item(step: str, request: Any, run_id: str, index: int, item: int) -> Any:
    """The span of one delivery of an item task (a fan-out's item, a routed step): a child
    of the span that dispatched it."""
    attributes = {
        "celery_durable.run_id": run_id,
        "celery_durable.workflow_id": run_id,
        "celery_durable.step_index": index,
        "celery_durable.item": item,
    }
    return _delivery(step, request, attributes)


@contextmanager
def _delivery(name: str, request: Any, attributes: dict[str, Any]) -> Iterator[None]:
    if not _recording():
        yield
        return
    parent = _context_of(_header(request, PARENT_HEADER))
    links = []
    linked = _context_of(_header(request, LINK_HEADER))
    if linked is not None:
        sender = trace.get_current_span(linked).get_span_context()
        if sender.is_valid:
            links.append(trace.Link(sender, {"celery_durable.link": "woken by"}))
    with _tracer().start_as_current_span(
        name,
        context=parent,  # None: the current context (a root in a worker)
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except Ignore:
            raise  # the delivery ended without a result: its outcome is set already
        except Retry as retry:
            _failed(span, retry.exc or retry, "retrying")
            raise
        except BaseException as exc:
            _failed(span, exc, "failed")
            raise
        else:
            if span.is_recording() and OUTCOME not in (getattr(span, "attributes", None) or {}):
                span.set_attribute(OUTCOME, "succeeded")


def _failed(span: Any, exc: BaseException, outcome: str) -> None:
    span.set_attribute(OUTCOME, outcome)
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


def claimed(attempt: int, replayed: int) -> None:
    """The delivery claimed its run: name the attempt on its span."""
    if trace is None:
        return
    span = trace.get_current_span()
    span.set_attribute("celery_durable.attempt", attempt)
    span.set_attribute("celery_durable.replayed_steps", replayed)


def outcome(name: str, detail: str | None = None) -> None:
    """How the current delivery ended, when it ends without a result or an error."""
    if trace is None:
        return
    span = trace.get_current_span()
    span.set_attribute(OUTCOME, name)
    if detail:
        span.set_attribute("celery_durable.detail", detail)


def step(name: str, index: int, run_id: str) -> Any:
    """The span of one executed step (a context manager)."""
    if not _recording():
        return _NOOP
    attributes = {
        "celery_durable.step_index": index,
        "celery_durable.run_id": run_id,
        "celery_durable.workflow_id": run_id,
    }
    return _tracer().start_as_current_span(name, attributes=attributes)


def event(name: str, **attributes: Any) -> None:
    """An event on the current span (a step's retry)."""
    if trace is None:
        return
    trace.get_current_span().add_event(name, {k: str(v) for k, v in attributes.items()})


@contextmanager
def linked(request: Any) -> Iterator[None]:
    """Run a wake-up task under its sender's context, so the messages it publishes carry
    it on (``add_link_headers``)."""
    context = None if trace is None else _context_of(_header(request, LINK_HEADER))
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)
