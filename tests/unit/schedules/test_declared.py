"""Schedules on the embedded default (SQLite, eager mode): declarations checked at once,
each slot fired once, the catch-up and overlap policies, a changed or dropped definition,
the beat import, and the operators' trigger and backfill. Gaps are made by moving a
schedule's next slot into the past, not by waiting."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from celery.schedules import crontab

from celery_durable import InvalidArgument, WorkflowStatus
from celery_durable.schedules import firing
from tests.support.schedules import fire_at, next_slot, runs_of, slot_outcomes


def test_bad_declarations_are_refused_naming_them(durable):
    @durable.workflow
    def job() -> None: ...

    cases = {
        "cron='61 * * * *'": {"cron": "61 * * * *"},
        "is not a known IANA time zone": {"cron": "0 2 * * *", "tz": "Mars/Olympus"},
        "every": {"every": 0},
        "overlap must be one of": {"every": 60, "overlap": "queue"},
        "catchup must be one of": {"every": 60, "catchup": "some"},
        "give cron= or every=": {},
        "can't take these arguments": {"every": 60, "args": (1,)},
        "can't be given to every run": {"every": 60, "options": {"countdown": 5}},
    }
    for message, options in cases.items():
        with pytest.raises(InvalidArgument, match=re.escape(message)):
            durable.schedule(job, **options)
    with pytest.raises(InvalidArgument, match="not a workflow of this app"):
        durable.schedule("nope", every=60)
    durable.schedule(job, every=60, name="job-hourly")
    durable.schedule(job, every=60, name="job-hourly")  # the same, declared again: fine
    with pytest.raises(InvalidArgument, match="'job-hourly': the name is already used"):
        durable.schedule(job, every=30, name="job-hourly")


def test_a_slot_fires_once_with_its_time_and_the_id_every_process_computes(durable):
    seen: list[dt.datetime] = []

    @durable.schedule(every=3600, tz="Europe/Paris")
    @durable.workflow
    def hourly(scheduled_for: dt.datetime) -> str:
        seen.append(scheduled_for)
        return "done"

    due = next_slot(durable, hourly.name)
    assert fire_at(durable, due - 1) == 0  # not yet
    assert fire_at(durable, due + 0.5) == 1
    assert fire_at(durable, due + 0.6) == 0  # a second sweeper: nothing left to fire
    [slot] = runs_of(durable.runtime.store, hourly.name)
    expected = dt.datetime.fromtimestamp(due, dt.timezone.utc)
    assert slot.slot == due
    assert slot.run_id == f"schedule:{hourly.name}:{expected:%Y-%m-%dT%H:%M:%SZ}"
    assert seen == [expected] and str(seen[0].tzinfo) == "Europe/Paris"
    assert durable.get_handle(slot.run_id).get(timeout=5) == "done"


@pytest.mark.parametrize(("catchup", "runs"), [("latest", 1), ("all", 6), ("none", 0)])
def test_after_a_gap_catchup_decides_what_fires(durable, catchup, runs):
    @durable.workflow
    def tick() -> None: ...

    # Five minutes and a half down: six slots missed, the last of them 30 s ago.
    durable.schedule(tick, every=60, catchup=catchup, overlap="allow")
    due = next_slot(durable, tick.name)
    fire_at(durable, due + 5 * 60 + 30)
    fired = [s.slot - due for s in runs_of(durable.runtime.store, tick.name)]
    assert fired == {"latest": [300.0], "all": [60.0 * k for k in range(6)], "none": []}[catchup]
    (row,) = durable.runtime.store.schedules.list_schedules()
    assert row.missed == 6 - runs
    assert row.next_slot == due + 360  # the next slot after the gap: nothing fires twice
    assert fire_at(durable, due + 5 * 60 + 40) == 0


def test_catchup_all_stops_at_its_window(durable):
    @durable.workflow
    def tick() -> None: ...

    durable.schedule(tick, every=60, catchup="all", catchup_window="10m", overlap="allow")
    due = next_slot(durable, tick.name)
    fire_at(durable, due + 7 * 24 * 3600)  # a week down: the last ten minutes' slots
    assert len(runs_of(durable.runtime.store, tick.name)) == 10


def test_overlap_skip_buffer_one_allow_and_cancel_previous(durable):
    from celery_durable import wait_for_signal

    @durable.workflow
    def slow() -> None:
        wait_for_signal("go", timeout=3600)

    for overlap in ("skip", "buffer_one", "allow", "cancel_previous"):
        durable.schedule(slow, every=60, overlap=overlap, name=f"slow-{overlap}")
    due = next_slot(durable, "slow-skip")
    for k in range(3):  # three slots; the first's run still waits at the later two
        fire_at(durable, due + 60 * k + 1)
    store = durable.runtime.store
    assert slot_outcomes(store, "slow-skip") == {"started": 1, "skipped": 2}
    rows = {row.name: row for row in store.schedules.list_schedules()}
    assert rows["slow-skip"].skipped == 2
    assert slot_outcomes(store, "slow-buffer_one") == {"started": 1, "skipped": 1}
    assert rows["slow-buffer_one"].buffered_slot == due + 60
    assert slot_outcomes(store, "slow-allow") == {"started": 3}
    statuses = [
        durable.get_handle(s.run_id).status() for s in runs_of(store, "slow-cancel_previous")
    ]
    assert statuses == [WorkflowStatus.CANCELLED, WorkflowStatus.CANCELLED, WorkflowStatus.WAITING]
    # The buffered slot starts once the active run has finished.
    [first] = runs_of(store, "slow-buffer_one")
    durable.get_handle(first.run_id).cancel()
    fire_at(durable, due + 121)
    assert [s.slot - due for s in runs_of(store, "slow-buffer_one")] == [0.0, 60.0]


def test_a_changed_definition_starts_from_its_next_slot_and_a_dropped_one_is_disabled(durable):
    @durable.workflow
    def job() -> None: ...

    durable.schedule(job, every=3600, name="a")
    durable.schedule(job, every=3600, name="b")
    old = next_slot(durable, "a")
    durable.runtime.schedules.clear()  # the next deploy: "a" changed, "b" gone
    durable.schedule(job, every=30, name="a")
    new = next_slot(durable, "a")
    rows = {row.name: row for row in durable.runtime.store.schedules.list_schedules()}
    assert rows["a"].every == 30 and new < old and new % 30 == 0
    assert rows["b"].disabled_at is not None
    assert fire_at(durable, old + 1) == 1  # "a" fires its latest slot; "b" nothing
    assert runs_of(durable.runtime.store, "b") == []
    assert runs_of(durable.runtime.store, "a")[0].slot == (old + 1) // 30 * 30


def test_schedules_from_beat_maps_entries_and_refuses_what_it_cant_express(durable):
    @durable.workflow
    def report(region: str) -> str:
        return region

    beat = {
        "report-eu": {"task": report.name, "schedule": dt.timedelta(minutes=15), "args": ("eu",)},
        "report-nightly": {
            "task": report.name,
            "schedule": crontab(minute=0, hour="2,4"),
            "kwargs": {"region": "us"},
            "options": {"queue": "reports"},
        },
        "plain-task": {"task": "some.celery.task", "schedule": 30.0},
    }
    assert durable.schedules_from_beat(beat) == ["report-eu", "report-nightly"]
    declared = durable.runtime.schedules
    assert declared["report-eu"].every == 900 and declared["report-eu"].args == ("eu",)
    assert declared["report-nightly"].cron == "0 2,4 * * *"
    assert declared["report-nightly"].options == {"queue": "reports"}
    bad = {
        "sunrise": {"task": report.name, "schedule": "at sunrise", "args": ("x",)},
        "relative": {"task": report.name, "schedule": 60, "args": ("x",), "relative": True},
    }
    with pytest.raises(InvalidArgument, match="'sunrise'.*neither a crontab.*'relative'"):
        durable.schedules_from_beat(bad)


def test_trigger_and_backfill_start_runs_by_hand_each_slot_once(durable):
    @durable.workflow
    def job() -> None: ...

    durable.schedule(job, every=60, name="hourly")
    durable.runtime.sweeper.sweep_once()
    triggered = firing.trigger(durable.runtime, "hourly")
    assert triggered.startswith("schedule:hourly:manual:")
    end = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    start = end - dt.timedelta(minutes=5)
    first = firing.backfill(durable.runtime, "hourly", start, end)
    again = firing.backfill(durable.runtime, "hourly", start, end)
    assert len(first) in (5, 6) and again == []
    assert slot_outcomes(durable.runtime.store, "hourly") == {
        "triggered": 1,
        "backfilled": len(first),
    }
    with pytest.raises(InvalidArgument, match="no schedule named 'nope'"):
        firing.trigger(durable.runtime, "nope")


def test_a_slow_poll_loses_no_slot_whatever_the_catchup(durable):
    @durable.workflow
    def tick() -> None: ...

    durable.schedule(tick, every=1, catchup="latest", overlap="allow")
    due = next_slot(durable, tick.name)
    fire_at(durable, due + 2.5)  # three slots due, the oldest 2.5 s late: not a gap
    assert [s.slot - due for s in runs_of(durable.runtime.store, tick.name)] == [0.0, 1.0, 2.0]
    (row,) = durable.runtime.store.schedules.list_schedules()
    assert row.missed == 0
