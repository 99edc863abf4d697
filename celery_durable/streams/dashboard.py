"""A run's stream as Server-Sent Events, for the dashboard's run page and any browser app
behind the same authentication: ``GET <dashboard>/stream?id=<run id>&key=<key>``
answers ``text/event-stream``, one event a value (``id:`` its offset, ``data:`` its
JSON), and a last ``close`` event once the stream is closed or the run finished. A client
that reconnects sends ``Last-Event-ID`` (EventSource does) and goes on after that offset;
``from=<offset>`` starts elsewhere. ``wiring.py`` registers ``STREAM_EVENTS``.

Example (a browser)::

    const source = new EventSource("/durable/stream?id=chat-42&key=tokens");
    source.onmessage = (event) => show(JSON.parse(event.data));
    source.addEventListener("close", () => source.close());
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from celery.exceptions import TimeoutError as CeleryTimeoutError

from celery_durable.core import validate
from celery_durable.errors import InvalidArgument, WorkflowNotFound
from celery_durable.ops.wing_parts import DashboardEvents
from celery_durable.streams.reading import read_stream

if TYPE_CHECKING:
    from celery_durable.ops.operations import Operations

# Seconds between two comments on an idle stream: proxies keep the connection, and the
# server learns of a client that went away (its write fails).
KEEPALIVE = 15.0
# How long a browser waits before it reconnects after the connection dropped (ms).
RETRY_MS = 2000


def first_offset(last_event_id: str | None, args: Mapping[str, str]) -> int:
    """Where a client starts: after its ``Last-Event-ID``, else at ``from`` (default 0)."""
    if last_event_id:
        if not last_event_id.isdigit():
            raise InvalidArgument(f"Last-Event-ID: an offset, not {last_event_id!r}")
        return int(last_event_id) + 1
    given = args.get("from", "0")
    if not given.isdigit():
        raise InvalidArgument(f"from: an offset (0 or more), not {given!r}")
    return int(given)


def stream_events(
    durable: Operations, last_event_id: str | None, args: Mapping[str, str]
) -> Iterator[str]:
    """The events of the stream ``args["key"]`` of run ``args["id"]``: checked now
    (InvalidArgument, WorkflowNotFound), then yielded as the stream is written."""
    run_id = validate.check_run_id(args.get("id", ""), "id")
    key = validate.check_text(args.get("key", ""), "key", max_chars=255, allow_empty=False)
    start = first_offset(last_event_id, args)
    if durable.runtime.store.get_status(run_id) is None:
        raise WorkflowNotFound(run_id)
    return _events(durable, run_id, key, start)


def _events(durable: Operations, run_id: str, key: str, start: int) -> Iterator[str]:
    store = durable.runtime.store
    yield f"retry: {RETRY_MS}\n\n"
    while True:
        values = read_stream(store, run_id, key, start, KEEPALIVE, with_offsets=True)
        try:
            for offset, value in values:
                start = offset + 1
                yield f"id: {offset}\ndata: {json.dumps(value)}\n\n"
        except CeleryTimeoutError:
            yield ": waiting\n\n"
            continue
        yield f"event: close\ndata: {json.dumps({'length': start})}\n\n"
        return


STREAM_EVENTS = DashboardEvents("stream", "/stream", stream_events)
