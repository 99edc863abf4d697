"""What operators see of streams: each stream of a run in ``durable show`` (key, length,
closed or open; the same in its JSON and on the dashboard's run page, through the wing
parts), and ``durable tail <run-id> [key]``, which prints values as they arrive.

Example::

    celery -A app durable tail chat-42 tokens        # one stream, until it is closed
    celery -A app durable tail chat-42 --json        # every stream of the run, as JSON lines
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click
from celery.exceptions import TimeoutError as CeleryTimeoutError

from celery_durable.core import serialization, validate
from celery_durable.errors import DurableError, WorkflowNotFound
from celery_durable.ops.cli_errors import database_error
from celery_durable.ops.wing_parts import RunPart
from celery_durable.store import FINISHED_STATUSES, RunRecord
from celery_durable.streams.reading import SAFETY_READ, StreamReading, read_stream
from celery_durable.streams.store_area import STREAMS

if TYPE_CHECKING:
    from celery_durable.ops.operations import Operations


def run_streams(durable: Operations, run: RunRecord) -> list[dict[str, Any]]:
    """The run's streams as ``durable show --json`` gives them: a finished run's are
    closed, whether or not its settle got to close them."""
    finished = run.status in FINISHED_STATUSES
    return [
        {"key": info.key, "length": info.length, "closed": info.closed or finished}
        for info in STREAMS.of(durable.runtime.store).list_streams(run.id)
    ]


def stream_lines(streams: list[dict[str, Any]]) -> list[str]:
    """``durable show``'s lines: one a stream."""
    if not streams:
        return []
    lines = ["streams:"]
    for stream in streams:
        state = "closed" if stream["closed"] else "open"
        count = "1 value" if stream["length"] == 1 else f"{stream['length']} values"
        lines.append(f"  {stream['key']}: {count}, {state}")
    return lines


STREAMS_PART = RunPart("streams", run_streams, stream_lines, "_run_streams.html")


def shown(value: Any) -> str:
    """A value as ``tail`` prints it for people: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def follow_all(
    durable: Operations, run_id: str, start: int, timeout: float | None
) -> Iterator[tuple[str, int, Any]]:
    """Every stream of the run from offset ``start``, (key, offset, value) as written,
    each stream found as it begins; ends once the run finished and each stream was read
    to its end (a running run may begin another stream at any time)."""
    store = durable.runtime.store
    area = STREAMS.of(store)
    readers: dict[str, StreamReading] = {}
    idle_since = time.monotonic()
    with store.listener() as listener:
        while True:
            run = store.get_run(run_id)  # before the streams: a finished run wrote them all
            if run is None:
                raise WorkflowNotFound(run_id)
            streams = area.list_streams(run_id)
            for info in streams:
                reading = readers.get(info.key)
                if reading is None:
                    reading = StreamReading(store, run_id, info.key, start, None)
                    readers[info.key] = reading
                for offset, value in reading.read().values:
                    reading.offset = offset + 1
                    idle_since = time.monotonic()
                    yield info.key, offset, serialization.loads(value)
            behind = any(readers[info.key].offset < info.length for info in streams)
            if behind:
                continue  # more than a page was written: read on at once
            if run.status in FINISHED_STATUSES:
                return
            waited = time.monotonic() - idle_since
            if timeout is not None and waited >= timeout:
                raise CeleryTimeoutError(
                    f"workflow run {run_id!r}: no value within {timeout}s; it goes on running"
                )
            pause = SAFETY_READ if timeout is None else min(SAFETY_READ, timeout - waited)
            listener.wait_for(run_id, pause)


def tail_command(find: Callable[[click.Context], Operations]) -> click.Command:
    """The command, reading the operations (the Durable) ``find`` returns for the context."""

    @click.command(
        name="tail",
        help="Print a run's stream values as they are written (every stream without KEY), "
        "until the stream is closed or the run finished.",
    )
    @click.argument("run_id")
    @click.argument("key", required=False)
    @click.option(
        "--from",
        "start",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="The offset to start at (a reader that saw offset N goes on with N+1).",
    )
    @click.option(
        "--timeout",
        type=click.FloatRange(min=0),
        default=None,
        help="Seconds to wait for each next value before giving up (default: no limit).",
    )
    @click.option("--json", "as_json", is_flag=True, help="One JSON object a value.")
    @click.pass_context
    def tail(
        ctx: click.Context,
        run_id: str,
        key: str | None,
        start: int,
        timeout: float | None,
        as_json: bool,
    ) -> None:
        instance = find(ctx)
        where = f"cannot tail workflow run {run_id!r}"
        try:
            validate.check_run_id(run_id)
            values: Iterator[tuple[str, int, Any]]
            if key is not None:
                found = read_stream(
                    instance.runtime.store, run_id, key, start, timeout, with_offsets=True
                )
                values = ((key, offset, value) for offset, value in found)
            else:
                values = follow_all(instance, run_id, start, timeout)
            for stream, offset, value in values:
                if as_json:
                    line = {"key": stream, "offset": offset, "value": value}
                    click.echo(json.dumps(line))
                else:
                    click.echo(shown(value) if key is not None else f"{stream}: {shown(value)}")
        except WorkflowNotFound:
            raise click.ClickException(f"{where}: no such run") from None
        except (DurableError, ValueError, CeleryTimeoutError) as exc:
            raise click.ClickException(f"{where}: {exc}") from None
        except Exception as exc:
            error = database_error(exc, instance.runtime.store, where)
            if error is None:
                raise
            raise error from None

    return tail
