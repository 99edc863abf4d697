"""Lifecycle log lines: each carries run_id, workflow, attempt and step_index; with
durable_log_json a real worker writes them as JSON lines."""

from __future__ import annotations

import json
import logging
import re
import sys

import pytest

import celery_durable as cd
from celery_durable import ConfigurationError, WorkflowStatus
from celery_durable.core.config import DurableConfig
from celery_durable.core.logs import FIELDS, JsonFormatter
from tests.support.waiting import wait_until


def test_every_lifecycle_line_carries_the_run_fields(durable, caplog):
    failures = {"left": 1}

    @durable.step(name="l.charge")
    def charge(n: int) -> int:
        return n

    @durable.workflow(name="l.flow", max_attempts=2, retry_backoff=0)
    def flow(n: int) -> int:
        first = charge(n)
        cd.wait_for_signal("go")
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("once")
        return charge(first + 1)

    @durable.workflow(name="l.parked")
    def parked() -> None:
        cd.wait_for_signal("never")

    caplog.set_level(logging.DEBUG, logger="celery_durable")
    handle = flow.delay(1)
    handle.signal("go")  # resumes, fails once: a retry, due at once
    durable.runtime.sweeper.sweep_once()  # the retry's delivery replays up to the wait and finishes
    assert handle.get(timeout=5) == 2
    other = parked.delay()
    other.cancel("not needed")

    expected = {  # what each lifecycle event's line says, and its level
        "start": (r"run \S+ started", logging.INFO),
        "claim": (r"claimed: attempt", logging.INFO),
        "step": (r"step \d+ \(l\.charge\) recorded ok", logging.DEBUG),
        "suspend": (r"is waiting for signal 'go'", logging.INFO),
        "wake": (r"woken by signal 'go'", logging.INFO),
        "signal taken": (r"consumed signal 'go'", logging.DEBUG),
        "retry": (r"failed on attempt 1 of 2, retrying", logging.WARNING),
        "settle": (r"run \S+ succeeded", logging.INFO),
        "cancel": (r"cancellation requested \(not needed\)", logging.INFO),
    }
    ours = [r for r in caplog.records if r.name.startswith("celery_durable")]
    for event, (pattern, level) in expected.items():
        lines = [r for r in ours if re.search(pattern, r.getMessage())]
        assert lines, f"no {event} line in {[r.getMessage() for r in ours]}"
        for record in lines:
            assert record.levelno == level, (event, record.getMessage())
            assert record.run_id in (handle.id, other.id), (event, record.getMessage())
            assert record.workflow in ("l.flow", "l.parked"), (event, record.getMessage())
            for name in FIELDS:
                assert hasattr(record, name), (event, name, record.getMessage())
    claims = [r for r in ours if "claimed" in r.getMessage() and r.run_id == handle.id]
    assert [r.attempt for r in claims] == [1, 1, 2]  # a suspension gives its attempt back
    (step,) = [r for r in ours if "(l.charge) recorded" in r.getMessage() and r.step_index == 2]
    assert step.attempt == 2


def test_items_children_and_operations_log_their_lifecycle_with_the_run_fields(durable, caplog):
    @durable.step(name="l.square")
    def square(n: int) -> int:
        return n * n

    @durable.workflow(name="l.child")
    def child(n: int) -> int:
        return square(n)

    @durable.workflow(name="l.parent", max_attempts=1)
    def parent(fail: bool) -> list[int]:
        squares = cd.map(square, [1, 2])
        if fail:
            raise RuntimeError("after the map")
        return [*squares, child.start_child(3).result()]

    caplog.set_level(logging.DEBUG, logger="celery_durable")
    failed = parent.delay(True)
    assert failed.wait(timeout=5) is WorkflowStatus.FAILED
    forked = failed.fork(from_step=1)
    failed.resume()
    assert durable.gc(older_than=0, dry_run=True).total >= 0
    done = parent.delay(False)
    assert done.get(timeout=5) == [1, 4, 9]

    ours = [r for r in caplog.records if r.name.startswith("celery_durable")]
    for record in ours:
        for name in FIELDS:
            assert hasattr(record, name), (name, record.getMessage())

    def line(pattern: str) -> logging.LogRecord:
        lines = [r for r in ours if re.search(pattern, r.getMessage())]
        assert lines, f"no {pattern!r} line in {[r.getMessage() for r in ours]}"
        return lines[0]

    item = line(r"item 1 of step 0 \(l\.square\) of run \S+ recorded ok")
    assert (item.run_id, item.step_index, item.attempt) == (failed.id, 0, 1)
    assert line(r"item 0 of step 0 \(l\.square\) of run \S+ claimed").levelno == logging.DEBUG
    started = line(rf"run \S+ started as a child of run {done.id}")
    assert started.workflow == "l.child" and started.run_id != done.id
    assert line(r"forked from run").run_id == forked.id
    assert line(r"resumed \(was FAILED").run_id == failed.id


def test_log_json_is_a_boolean_setting():
    assert DurableConfig.from_sources(environ={"CELERY_DURABLE_LOG_JSON": "yes"}).log_json
    assert not DurableConfig.from_sources(environ={"CELERY_DURABLE_LOG_JSON": "0"}).log_json
    assert DurableConfig.from_sources(app_conf={"durable_log_json": True}).log_json
    with pytest.raises(ConfigurationError, match="durable_log_json"):
        DurableConfig.from_sources(environ={"CELERY_DURABLE_LOG_JSON": "maybe"})


def test_the_json_formatter_writes_the_fields_and_the_exception():
    try:
        raise ValueError("bad")
    except ValueError:
        record = logging.LogRecord(
            "celery_durable.workflow", logging.ERROR, "", 0, "run %s failed", ("r1",), True
        )
        record.exc_info = sys.exc_info()
    record.run_id, record.workflow = "r1", "shop.checkout"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "run r1 failed" and line["level"] == "ERROR"
    assert line["run_id"] == "r1" and line["attempt"] is None
    assert "ValueError: bad" in line["exception"]


def test_a_worker_with_log_json_writes_json_lines(basic_app, start_worker, key):
    worker = start_worker(env={"CELERY_DURABLE_LOG_JSON": "1"})
    handle = basic_app.signalled_steps.delay(key)
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 30, message="WAITING")
    handle.signal("go", 1)
    assert handle.get(timeout=30) == [10, 1, 20]

    def ours() -> list[dict]:
        lines = [json.loads(t) for t in worker.log().splitlines() if t.startswith("{")]
        return [line for line in lines if line.get("run_id") == handle.id]

    def settled() -> list[dict]:
        lines = ours()
        return lines if any("succeeded" in line["message"] for line in lines) else []

    lines = wait_until(settled, 30, 0.1, lambda: f"JSON lines; log:\n{worker.log()}")
    messages = [line["message"] for line in lines]
    for words in ("claimed", "is waiting for signal 'go'", "woken by signal 'go'", "succeeded"):
        assert any(words in m for m in messages), (words, messages)
    for line in lines:
        assert set(FIELDS) <= set(line) and line["workflow"] == basic_app.signalled_steps.name
    (succeeded,) = [line for line in lines if line["message"].endswith("succeeded")]
    assert succeeded["attempt"] == 1 and succeeded["step_index"] == 3
