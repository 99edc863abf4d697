"""What operators see and do of schedules (ops/schedules.py), on the embedded default:
``durable schedules`` (table and JSON) with its statuses, and pause, resume, trigger and
backfill from the command line, each with ``--json``."""

from __future__ import annotations

import json

from tests.support.cli import invoke
from tests.support.schedules import fire_at, next_slot, runs_of, slot_outcomes


def test_the_schedules_command_lists_pauses_resumes_triggers_and_backfills(durable):
    from celery_durable import wait_for_signal

    @durable.workflow
    def slow() -> None:
        wait_for_signal("go", timeout=3600)

    durable.schedule(slow, every=60, name="every-minute")
    due = next_slot(durable, "every-minute")
    fire_at(durable, due + 1)
    fire_at(durable, due + 61)  # its run still waits: this slot is skipped
    [listed] = [json.loads(line) for line in invoke(durable, "schedules", "--json").splitlines()]
    assert listed["name"] == "every-minute" and listed["status"] == "skipping"
    assert listed["skipped"] == 1 and listed["timing"] == "every 1m"
    assert listed["last_run_id"] == runs_of(durable.store, "every-minute")[0].run_id
    table = invoke(durable, "schedules")
    assert "every-minute" in table and "skipping" in table and "SKIPPED" in table

    assert json.loads(invoke(durable, "schedules", "pause", "every-minute", "--json")) == {
        "schedule": "every-minute",
        "paused": True,
    }
    assert fire_at(durable, due + 3600) == 0  # paused: nothing fires
    assert "paused" in invoke(durable, "schedules")
    invoke(durable, "schedules", "resume", "every-minute")

    triggered = json.loads(invoke(durable, "schedules", "trigger", "every-minute", "--json"))
    assert triggered["run_id"].startswith("schedule:every-minute:manual:")
    start = "2026-01-01T00:00:00Z"
    filled = invoke(
        durable,
        "schedules",
        "backfill",
        "every-minute",
        "--from",
        start,
        "--to",
        "2026-01-01T00:03:00Z",
        "--json",
    )
    assert len(json.loads(filled)["run_ids"]) == 4  # 00:00, 00:01, 00:02, 00:03
    again = invoke(
        durable,
        "schedules",
        "backfill",
        "every-minute",
        "--from",
        start,
        "--to",
        "2026-01-01T00:03:00Z",
        "--json",
    )
    assert json.loads(again)["run_ids"] == []
    outcomes = slot_outcomes(durable.store, "every-minute")
    assert outcomes == {"started": 1, "skipped": 1, "triggered": 1, "backfilled": 4}


def test_an_unknown_schedule_is_named(durable):
    import types

    from click.testing import CliRunner

    from celery_durable.cli import durable as durable_group

    done = CliRunner().invoke(
        durable_group,
        ["schedules", "pause", "nope"],
        obj=types.SimpleNamespace(app=durable.app),
    )
    assert done.exit_code == 1 and "no schedule named 'nope'" in done.output
