"""The flow-control, schedules, canvas and async examples work as written: SQLite store, file
broker, real worker processes (the docs' guides include them)."""

from __future__ import annotations

from tests.support.examples import run_example


def test_limits_example_limits_orders_dedups_debounces_and_cancels_at_a_deadline(tmp_path):
    printed = run_example("limits.py", tmp_path)
    assert "most calls at once, per tenant: [1, 1]" in printed
    assert "rebuilt in order: ['first', 'high', 'low']" in printed  # priority, then age
    assert "one run for the key: True -> alice synced at version 1" in printed
    assert "debounced: 1 run -> bob synced at version 3" in printed  # the last call's args
    assert "o-1 CANCELLED: deadline exceeded" in printed


def test_schedules_example_fires_each_slot_from_the_workers_and_takes_beat_entries(tmp_path):
    printed = run_example("schedules.py", tmp_path)
    assert "heartbeat runs: 3" in printed
    assert "slot zone: {'Europe/Paris'}" in printed
    assert "ids name their slots: True" in printed
    assert "slots on whole seconds: True" in printed
    assert "schedule:report-eu: report for eu" in printed
    assert "schedule=heartbeat paused=True" in printed
    lines = printed.splitlines()
    header = next(line for line in lines if line.startswith("NAME"))
    assert header.split() == [
        *("NAME", "WHEN", "STATUS", "NEXT", "SLOT", "LAST", "RUN", "LAG", "SKIPPED", "MISSED")
    ]
    rows = {line.split()[0]: line.split() for line in lines[lines.index(header) + 1 :] if line}
    assert rows["heartbeat"][1:4] == ["every", "1s", "paused"]
    assert rows["report-eu"][1:3] == ["every", "2s"]
    # "skipping" if a run of it outlived its slot on a slow machine (overlap="skip")
    assert rows["report-eu"][3] in ("active", "skipping")


def test_canvas_example_chains_groups_chords_reports_and_starts_by_name(tmp_path):
    printed = run_example("canvas.py", tmp_path)
    assert "chain: notified: 50" in printed
    assert "group: [10, 20, 30]" in printed
    assert "chord: 60" in printed
    assert "errback: the run ValueError('order 7 has no address')" in printed
    assert "handle is an AsyncResult: True" in printed
    assert "backend says: WAITING waiting for signal 'decision'" in printed
    assert "backend result: order 8 approved" in printed
    assert "by name: 90" in printed
    assert "in the store: SUCCEEDED" in printed


def test_async_example_gathers_its_steps_and_runs_a_plain_step_off_the_loop(tmp_path):
    printed = run_example("async_steps.py", tmp_path)
    assert "quote: 3.0" in printed  # (0.5 + 0.75 + 1.25) * 1.2
    assert (
        "steps: [(0, 'fetch_price'), (1, 'fetch_price'), (2, 'fetch_price'), (3, 'tax_rate'), "
        "(4, 'sleep')]" in printed
    )
    assert "the three fetches overlapped: True" in printed
