"""Streams with real workers: a stream read live from this process while a worker's run
writes it, then again from offset 0; a SIGKILL mid-stream (no value lost or repeated for
a reader resuming from its offset); ``durable tail`` and ``durable show``."""

from __future__ import annotations

import json
from typing import Any

from celery_durable import WorkflowStatus
from tests.support.cli import celery
from tests.support.waiting import wait_until
from tests.support.workers import CeleryProcess

APP = "tests.apps.streams"


def token(n: int) -> dict[str, Any]:
    return {"n": n, "text": f"t{n}"}


def test_a_stream_is_read_live_while_the_run_writes_then_again_from_zero(
    streams_app, start_worker, key, rds
):
    rds.set(f"block:{key}:g", "1")  # the step holds after its first half
    start_worker("streams", app=APP)
    handle = streams_app.tokens.delay(key, 10)
    reader = handle.read_stream("tokens", timeout=60, with_offsets=True)
    first = [next(reader) for _ in range(5)]
    assert first == [(n, token(n)) for n in range(5)]
    assert handle.status() is WorkflowStatus.RUNNING  # read while the step still writes
    rds.delete(f"block:{key}:g")
    assert list(reader) == [(n, token(n)) for n in range(5, 10)]  # ends as the run settles
    assert handle.get(timeout=60) == 1
    assert list(handle.read_stream("tokens")) == [token(n) for n in range(10)]
    assert list(handle.read_stream("events")) == ["begin", "end"]
    shown = celery("durable", "show", handle.id, "--json", app=APP)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["streams"] == [
        {"key": "events", "length": 2, "closed": True},
        {"key": "tokens", "length": 10, "closed": True},
    ]
    lines = celery("durable", "show", handle.id, app=APP)
    assert "streams:\n  events: 2 values, closed\n  tokens: 10 values, closed\n" in lines.stdout


def test_a_sigkill_mid_stream_loses_and_repeats_nothing_for_a_resuming_reader(
    streams_app, start_worker, key, rds
):
    rds.set(f"block:{key}:g", "1")
    first = start_worker("stream-a", app=APP)
    handle = streams_app.tokens.delay(key, 20)
    seen = []
    for pair in handle.read_stream("tokens", timeout=60, with_offsets=True):
        seen.append(pair)
        if len(seen) == 7:
            break  # the reader goes away after offset 6
    wait_until(lambda: rds.get(f"started:{key}:g"), 30, message="the step to hold at 10")
    first.kill()  # mid-stream: 10 values written, 10 to go
    rds.delete(f"block:{key}:g")
    second = start_worker("stream-b", app=APP)
    # The retried step writes its first 10 values again: stored once, at their offsets.
    resumed = list(
        handle.read_stream("tokens", start=seen[-1][0] + 1, timeout=120, with_offsets=True)
    )
    assert seen + resumed == [(n, token(n)) for n in range(20)]
    assert handle.get(timeout=60) == 2, second.log()  # the step ran twice
    assert list(handle.read_stream("tokens")) == [token(n) for n in range(20)]
    assert list(handle.read_stream("events")) == ["begin", "end"]  # the replayed body's too


def test_async_bodies_and_steps_stream_on_a_worker(streams_app, start_worker, key):
    start_worker("streams-async", app=APP)
    handle = streams_app.async_tokens.delay(key, 5)
    assert list(handle.read_stream("tokens", timeout=60)) == [f"a{n}" for n in range(5)]
    assert handle.get(timeout=60) == 5
    assert list(handle.read_stream("events")) == ["begin", "end"]


def test_durable_tail_prints_values_as_they_arrive(streams_app, start_worker, key, rds):
    rds.set(f"block:{key}:p", "1")  # the run holds before its first value
    start_worker("streams-tail", app=APP)
    handle = streams_app.progress.delay(key, 4)
    wait_until(lambda: rds.get(f"started:{key}:p"), 30, message="the run to start")
    one = CeleryProcess(APP, ["durable", "tail", handle.id, "progress", "--json"], {}, "tail")
    every = CeleryProcess(APP, ["durable", "tail", handle.id], {}, "tail-all")
    try:
        rds.delete(f"block:{key}:p")  # tail was waiting: the values come as written
        assert one.wait_exit(60) == 0, one.log()
        assert every.wait_exit(60) == 0, every.log()
    finally:
        one.kill()
        every.kill()
    printed = [json.loads(line) for line in one.log().splitlines() if line.startswith("{")]
    assert printed == [
        {"key": "progress", "offset": n, "value": {"done": n + 1, "of": 4}} for n in range(4)
    ]
    lines = [line for line in every.log().splitlines() if line.startswith("progress: ")]
    assert lines == [f'progress: {{"done": {n}, "of": 4}}' for n in range(1, 5)]
    assert handle.get(timeout=30) == 4
    missing = celery("durable", "tail", "no-such-run", "progress", app=APP)
    assert missing.returncode == 1 and "no such run" in missing.stderr


def test_a_write_after_the_close_is_refused_on_a_worker(streams_app, start_worker, key):
    start_worker("streams-closed", app=APP)
    handle = streams_app.closed_early.delay(key)
    assert "stream 'done'" in handle.get(timeout=60) and "is closed" in handle.get(timeout=5)
    assert list(handle.read_stream("done")) == [1]
