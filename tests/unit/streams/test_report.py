"""``durable show`` lists a run's streams (text and JSON) and ``durable tail`` prints their
values, in-process on the embedded default."""

from __future__ import annotations

import json

import celery_durable as cd
from celery_durable import Durable
from celery_durable.testing import eager_workflows
from tests.support.cli import invoke


def test_show_lists_the_streams_and_tail_prints_their_values(durable: Durable) -> None:
    @durable.workflow
    def imported() -> None:
        for done in (1, 2):
            cd.write_stream("progress", {"done": done})
        cd.write_stream("log", "half way")
        cd.close_stream("log")

    with eager_workflows(durable):
        imported.apply_async((), run_id="imp-1").get(timeout=10)
    shown = invoke(durable, "show", "imp-1")
    assert "streams:\n  log: 1 value, closed\n  progress: 2 values, closed\n" in shown
    as_json = json.loads(invoke(durable, "show", "imp-1", "--json"))
    assert as_json["streams"] == [
        {"key": "log", "length": 1, "closed": True},
        {"key": "progress", "length": 2, "closed": True},
    ]
    assert invoke(durable, "tail", "imp-1", "progress") == '{"done": 1}\n{"done": 2}\n'
    assert invoke(durable, "tail", "imp-1", "log", "--json") == (
        '{"key": "log", "offset": 0, "value": "half way"}\n'
    )
    every = invoke(durable, "tail", "imp-1", "--from", "1")
    assert every.splitlines() == ['progress: {"done": 2}']
