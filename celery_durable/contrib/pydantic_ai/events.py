"""An agent run's events in the workflow run's stream: each model delta, tool call and
tool result, as Pydantic AI's JSON of the event, so a browser (the dashboard's Server-Sent
Events), ``durable tail`` or ``handle.read_stream(key)`` shows tokens and tool calls as
they happen, and again after a reconnect.

A model's deltas are written in its request's step, tool events in steps of their own
(Pydantic AI's event steps): a step's writes are stored once, so a replay or a retry
adds none twice.

Example::

    CeleryDurability(stream="agent")      # then: handle.read_stream("agent")
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.messages import AgentStreamEvent
from pydantic_ai.tools import AgentDepsT, RunContext

from celery_durable.body.context import WorkflowContext
from celery_durable.errors import PayloadTooLarge
from celery_durable.streams.writing import write_stream

EVENTS: TypeAdapter[Any] = TypeAdapter(AgentStreamEvent)


def stream_writer(
    key: str, then: EventStreamHandler[AgentDepsT] | None
) -> EventStreamHandler[AgentDepsT]:
    """An event handler that writes each event to the run's stream ``key`` (in a
    workflow; outside one it writes nothing), then hands it to ``then`` if given."""

    async def handle(ctx: RunContext[AgentDepsT], events: AsyncIterable[Any]) -> None:
        written = _written(key, events)
        if then is None:
            async for _ in written:
                pass
        else:
            await then(ctx, written)

    return handle


async def _written(key: str, events: AsyncIterable[Any]) -> AsyncIterator[Any]:
    in_workflow = WorkflowContext.current() is not None
    async for event in events:
        if in_workflow:
            write_event(key, event)
        yield event


def write_event(key: str, event: Any) -> None:
    """Write the event as Pydantic AI's JSON of it; one too large for a stream value is
    written as its kind alone, marked ``"truncated"``: a large tool result fails no step."""
    try:
        write_stream(key, EVENTS.dump_python(event, mode="json"))
    except PayloadTooLarge:
        write_stream(key, {"event_kind": getattr(event, "event_kind", None), "truncated": True})
