"""The test app with streams: a worker started with ``-A tests.apps.streams`` runs these
and everything of ``tests.apps.basic``. Steps mark where they are in Redis
(``started:<key>:<step>``) and hold while the test holds ``block:<key>:<step>``, so a
test reads a stream while the run is still writing it, or SIGKILLs the worker mid-stream."""

from __future__ import annotations

import asyncio

import celery_durable as cd
from tests.apps.basic import app, block_while_flagged, durable, effect

__all__ = ["app", "durable", "tokens", "async_tokens", "progress", "closed_early"]


@durable.step
def generate(key: str, first: int, count: int) -> int:
    """Writes ``t<first>``.. to "tokens", holding after the first half (``block:<key>:g``).
    A retry writes the same values at the same places: stored once."""
    tries = effect(key, "g")
    half = first + count // 2
    for n in range(first, first + count):
        if n == half:
            block_while_flagged(key, "g")
        cd.write_stream("tokens", {"n": n, "text": f"t{n}"})
    return tries


@durable.workflow
def tokens(key: str, count: int) -> int:
    """The body's writes ("events") and a step's ("tokens"), one stream left open: the
    run's settle closes it."""
    cd.write_stream("events", "begin")
    tries = generate(key, 0, count)
    cd.write_stream("events", "end")
    cd.close_stream("events")
    return tries


@durable.step
async def agenerate(key: str, count: int) -> int:
    for n in range(count):
        cd.write_stream("tokens", f"a{n}")
        await asyncio.sleep(0)
    return count


@durable.workflow
async def async_tokens(key: str, count: int) -> int:
    """An async body and step writing (a plain call: nothing to await)."""
    cd.write_stream("events", "begin")
    total = await agenerate(key, count)
    cd.write_stream("events", "end")
    return total


@durable.step
def import_rows(key: str, rows: int) -> int:
    for done in range(1, rows + 1):
        cd.write_stream("progress", {"done": done, "of": rows})
    return rows


@durable.workflow
def progress(key: str, rows: int) -> int:
    """A progress bar's values, for ``durable tail`` and the dashboard."""
    block_while_flagged(key, "p")
    return import_rows(key, rows)


@durable.workflow
def closed_early(key: str) -> str:
    """A write after its stream's close is refused: StreamClosed."""
    cd.write_stream("done", 1)
    cd.close_stream("done")
    try:
        cd.write_stream("done", 2)
    except cd.StreamClosed as exc:
        return str(exc)
    return "written"
