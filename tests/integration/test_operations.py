"""Operating runs from the CLI alone: ``celery -A tests.apps.basic durable list|stats|...``
against real Postgres and a real worker.

The session's runs share one namespace, so every listing here is narrowed to this test's
runs (by workflow and ``--since`` the test's start); counts are checked as lower bounds.
"""

from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa

from celery_durable import WorkflowNotResumable, WorkflowStatus
from tests.support.builders import rows_of
from tests.support.cli import celery
from tests.support.services import effects
from tests.support.waiting import wait_until

FIXABLE = "tests.apps.basic.fixable"
FOUR_STEPS = "tests.apps.basic.four_steps"


def since_now(basic_app) -> str:  # type: ignore[no-untyped-def]
    """``--since`` for runs started from now on (the database clock stamps them)."""
    from celery_durable.ops.console import iso

    return str(iso(basic_app.durable.runtime.store.now() - 0.001))


def finished(*handles) -> None:  # type: ignore[no-untyped-def]
    for handle in handles:
        wait_until(lambda h=handle: h.status().finished, 60, message=f"{handle.id} to finish")


def failed_runs(basic_app, rds, key: str, count: int) -> list:  # type: ignore[no-untyped-def]
    """``count`` runs of ``fixable`` that fail (each has its own bug flag)."""
    handles = []
    for i in range(count):
        rds.set(f"bug:{key}-{i}", "1")
        handles.append(basic_app.fixable.delay(f"{key}-{i}"))
    finished(*handles)
    assert {h.status().value for h in handles} == {"FAILED"}
    return handles


def test_list_shows_failing_runs_in_an_aligned_table(basic_app, shared_worker, key, rds):
    since = since_now(basic_app)
    failed = failed_runs(basic_app, rds, key, 3)
    ok = basic_app.four_steps.delay(f"{key}-ok")
    finished(ok)
    done = celery("durable", "list", "--status", "failed", "--workflow", FIXABLE, "--since", since)
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["ID", "WORKFLOW", "STATUS", "ATTEMPT", "CREATED", "TOOK", "DETAIL"]
    assert sorted(row.split()[0] for row in rows) == sorted(h.id for h in failed)
    for column in ("WORKFLOW", "STATUS", "ATTEMPT", "DETAIL"):
        at = header.index(column)
        assert all(row[at - 2 : at] == "  " and row[at] != " " for row in rows), column
    assert all("FAILED  2/2" in row and "RuntimeError: bug in step 2 of" in row for row in rows)
    # Other statuses and workflows are filtered out.
    ok_only = celery("durable", "list", "--workflow", FOUR_STEPS, "--since", since)
    assert ok.id in ok_only.stdout and not any(h.id in ok_only.stdout for h in failed)
    wrong = celery("durable", "list", "--status", "failed,broken")
    assert wrong.returncode == 1 and "status='broken' is not a run status" in wrong.stderr


def test_list_json_pages_with_a_cursor_stable_while_runs_start(basic_app, shared_worker, key, rds):
    since = since_now(basic_app)
    failed = failed_runs(basic_app, rds, key, 5)
    listing = ["durable", "list", "--workflow", FIXABLE, "--since", since, "--json"]
    everything = [json.loads(line) for line in celery(*listing).stdout.splitlines()]
    assert sorted(run["id"] for run in everything) == sorted(h.id for h in failed)
    first = [json.loads(line) for line in celery(*listing, "--limit", "2").stdout.splitlines()]
    assert first == everything[:2]
    assert first[0]["status"] == "FAILED" and first[0]["error"]["type"] == "builtins.RuntimeError"
    # Runs started between two pages appear above the first page, never in the next ones.
    newer = failed_runs(basic_app, rds, f"{key}-new", 2)
    rest = celery(*listing, "--after", first[-1]["cursor"]).stdout.splitlines()
    assert [json.loads(line)["id"] for line in rest] == [run["id"] for run in everything[2:]]
    fresh = [
        json.loads(line)["id"] for line in celery(*listing, "--limit", "2").stdout.splitlines()
    ]
    assert sorted(fresh) == sorted(h.id for h in newer)
    table = celery("durable", "list", "--workflow", FIXABLE, "--since", since, "--limit", "3")
    assert table.stdout.splitlines()[-1].startswith("next page: --after ")


def test_stats_counts_runs_by_workflow_and_status(basic_app, shared_worker, key, rds):
    failed_runs(basic_app, rds, key, 2)
    waiting = basic_app.collector.delay(key, 1)
    wait_until(lambda: waiting.status().value == "WAITING", 30, message="the run to wait")
    done = celery("durable", "stats", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    counts = {(c["workflow"], c["status"]): c["runs"] for c in stats["counts"]}
    assert counts[(FIXABLE, "FAILED")] >= 2
    assert counts[("tests.apps.basic.collector", "WAITING")] >= 1
    assert stats["oldest_waiting"]["wait_signal"] == "item"
    assert stats["due"]["runs"] >= 0 and isinstance(stats["recoveries"], int)
    text = celery("durable", "stats").stdout.splitlines()
    assert text[0].split() == [
        "WORKFLOW",
        "PENDING",
        "RUNNING",
        "WAITING",
        "SUCCEEDED",
        "FAILED",
        "CANCELLED",
        "RECOVERIES",
    ]
    row = next(line for line in text if line.startswith(FIXABLE + " "))
    assert int(row.split()[5]) == counts[(FIXABLE, "FAILED")]
    assert any(line.startswith("oldest waiting: ") for line in text)
    waiting.cancel("done")


def show_json(run_id: str) -> dict:
    done = celery("durable", "show", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_show_json_has_steps_with_durations_waits_signals_and_state(basic_app, shared_worker, key):
    handle = basic_app.booking.delay(key, 600)
    wait_until(lambda: handle.status().value == "WAITING", 30, message="the run to wait")
    handle.signal("nudge", {"n": 1})  # nobody waits for it: it stays pending
    waiting = show_json(handle.id)
    assert waiting["status"] == "WAITING" and waiting["workflow"] == "tests.apps.basic.booking"
    assert waiting["waiting"]["signal"] == "approval" and waiting["waiting"]["until"]
    assert [(s["name"], s["status"]) for s in waiting["steps"]] == [
        ("tests.apps.basic.numbered", "ok"),
        ("celery_durable.signal:approval", "waiting"),
    ]
    assert waiting["steps"][0]["duration"] >= 0 and waiting["steps"][0]["output"] == 10
    assert [s["name"] for s in waiting["pending_signals"]] == ["nudge"]
    text = celery("durable", "show", handle.id).stdout
    assert "waiting for signal 'approval' until " in text and "pending signals: 'nudge'" in text
    handle.signal("approval", {"by": "alice"})
    assert handle.get(timeout=30)["status"] == "confirmed"
    done = show_json(handle.id)
    assert [s["status"] for s in done["steps"]] == ["ok"] * 4
    approval, sleep = done["steps"][1], done["steps"][2]
    assert approval["output"] == {"by": "alice"} and approval["duration"] > 0  # waited
    assert sleep["name"] == "celery_durable.sleep" and sleep["duration"] >= 0.2  # cd.sleep(0.2)
    assert done["waiting"] is None and done["duration"] > 0
    assert [k["key"] for k in done["state_keys"]] == ["state"]
    assert [s.name for s in handle.steps()] == [s["name"] for s in done["steps"]]
    assert all(s.duration is not None for s in handle.steps())


def test_show_says_which_step_failed_and_why(basic_app, shared_worker, key, rds):
    (handle,) = failed_runs(basic_app, rds, key, 1)
    shown = show_json(handle.id)
    assert shown["status"] == "FAILED" and shown["attempt"] == 2 and shown["max_attempts"] == 2
    assert shown["error"]["type"] == "builtins.RuntimeError"
    assert "Traceback" in shown["error"]["traceback"]
    failing = shown["steps"][1]
    assert failing["status"] == "error" and failing["input"] == [[f"{key}-0", 2], {}]
    assert failing["error"]["message"] == f"bug in step 2 of {key}-0"
    text = celery("durable", "show", handle.id).stdout.splitlines()
    at = text.index(next(line for line in text if "step 1: tests.apps.basic.buggy error" in line))
    assert text[at + 1] == f"    RuntimeError: bug in step 2 of {key}-0"
    assert text[-1] == f"error: RuntimeError: bug in step 2 of {key}-0"


def test_resume_after_fixing_the_bug_continues_from_the_failed_step(
    basic_app, shared_worker, key, rds
):
    store = basic_app.durable.runtime.store
    (handle,) = failed_runs(basic_app, rds, key, 1)
    run_key = f"{key}-0"
    before = store.load_steps(handle.id)
    assert [before[0].status, before[1].status] == ["ok", "error"]
    rds.delete(f"bug:{run_key}")  # the fix is deployed: the worker's code no longer fails
    done = celery("durable", "resume", handle.id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"{handle.id}: resumed (was FAILED after attempt 2), continues at step 1, "
        "which failed and runs again"
    )
    assert handle.get(timeout=30) == [10, 20, 30]
    # Step 0 was kept (same record, not run again); the failed step ran once more.
    assert store.load_steps(handle.id)[0] == before[0]
    assert [effects(rds, run_key, s) for s in ("s1", "buggy2", "s3")] == [1, 3, 1]
    assert show_json(handle.id)["attempt"] == 1  # a fresh attempt budget
    again = celery("durable", "resume", handle.id)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"Error: cannot resume workflow run {handle.id!r}: its status is SUCCEEDED "
        "(only FAILED or CANCELLED runs resume)"
    )


def test_a_run_that_is_running_is_not_resumed(basic_app, shared_worker, key, rds):
    rds.set(f"block:{key}:v2", "1")
    handle = basic_app.four_steps.delay(key)
    wait_until(lambda: rds.exists(f"started:{key}:v2"), 30, message="step 2 to start")
    refused = celery("durable", "resume", handle.id, f"nope-{key}")
    assert refused.returncode == 1
    assert f"{handle.id!r}: its status is RUNNING (only FAILED or CANCELLED" in refused.stderr
    assert f"'nope-{key}': no such run" in refused.stderr
    with pytest.raises(WorkflowNotResumable, match="its status is RUNNING"):
        handle.resume()
    rds.delete(f"block:{key}:v2")
    assert handle.get(timeout=30) == ["1@v1", "2@v1", "3@v1", "4@v1"]
    assert [effects(rds, key, f"v{n}") for n in range(1, 5)] == [1, 1, 1, 1]


def test_a_cancelled_run_resumes_where_it_waited(basic_app, shared_worker, key, rds, caplog):
    handle = basic_app.collector.delay(key, 1)
    wait_until(lambda: handle.status().value == "WAITING", 30, message="the run to wait")
    handle.cancel("by mistake")
    with caplog.at_level(logging.INFO, logger="celery_durable.operations"):
        assert handle.resume() is WorkflowStatus.PENDING
    (line,) = [r for r in caplog.records if r.name == "celery_durable.operations"]
    assert (line.run_id, line.workflow, line.attempt, line.step_index) == (
        handle.id,
        "tests.apps.basic.collector",
        0,  # a suspended run gave its attempt back
        1,  # step 0 ran; the wait (step 1) did not finish
    )
    assert "resumed (was CANCELLED" in line.getMessage()
    # Replay reaches the wait again and suspends: the run waits for its signal as before.
    wait_until(lambda: handle.status().value == "WAITING", 30, message="the run to wait again")
    handle.signal("item", "late")
    assert handle.get(timeout=30) == ["late"]
    assert effects(rds, key, "s1") == 1


def test_bulk_resume_after_a_fix_prints_what_it_resumed_and_is_idempotent(
    basic_app, shared_worker, key, rds
):
    since = since_now(basic_app)
    failed = failed_runs(basic_app, rds, key, 3)
    other = basic_app.permanent.delay(key)  # another workflow's failure: left alone
    finished(other)
    bulk = ["durable", "resume", "--workflow", FIXABLE, "--since", since]
    dry = celery(*bulk, "--status", "failed", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert sorted(line.split()[2] for line in dry.stdout.splitlines()[:-1]) == sorted(
        h.id for h in failed
    )
    assert dry.stdout.splitlines()[-1] == f"would resume 3 run(s) of {FIXABLE}"
    assert {h.status().value for h in failed} == {"FAILED"}  # a dry run changes nothing
    for i in range(3):
        rds.delete(f"bug:{key}-{i}")
    done = celery(*bulk)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(line.split()[1] for line in lines[:-1]) == sorted(h.id for h in failed)
    assert all("FAILED 2/2  RuntimeError: bug in step 2" in line for line in lines[:-1])
    assert lines[-1] == f"resumed 3 run(s) of {FIXABLE}"
    for h in failed:
        assert h.get(timeout=30) == [10, 20, 30]
    again = celery(*bulk)
    assert again.stdout.strip() == f"resumed 0 run(s) of {FIXABLE}"
    assert other.status().value == "FAILED"
    both = celery("durable", "resume", "x", "--workflow", FIXABLE)
    assert both.returncode == 2 and "not both" in both.stderr


def test_fork_from_step_2_of_4_runs_the_rest_on_todays_code(
    basic_app, shared_worker, key, rds, caplog
):
    origin = basic_app.four_steps.delay(key)
    assert origin.get(timeout=30) == ["1@v1", "2@v1", "3@v1", "4@v1"]
    rds.set(f"version:{key}", "2")  # today's code
    done = celery("durable", "fork", origin.id, "--from-step", "2")
    assert done.returncode == 0, done.stderr
    fork_id = done.stdout.split(":")[0]
    assert done.stdout.strip() == (
        f"{fork_id}: forked from {origin.id} at step 2 (kept steps 0 to 1), PENDING"
    )
    fork = basic_app.durable.get_handle(fork_id)
    assert fork.get(timeout=30) == ["1@v1", "2@v1", "3@v2", "4@v2"]
    assert [effects(rds, key, f"v{n}") for n in range(1, 5)] == [1, 1, 2, 2]
    shown = celery("durable", "show", fork_id).stdout.splitlines()
    assert shown[2] == f"forked from {origin.id} at step 2 (steps 0 to 1 kept)"
    assert show_json(fork_id)["forked_from"] == {"id": origin.id, "step": 2}
    assert show_json(origin.id)["forked_from"] is None
    beyond = celery("durable", "fork", origin.id, "--from-step", "5")
    assert beyond.returncode == 1
    assert beyond.stderr.strip() == (
        f"Error: cannot fork workflow run {origin.id!r}: from_step=5 is beyond the recorded "
        f"steps of workflow run {origin.id!r}: steps 0 to 3 finished, so from_step can be 0 to 4"
    )
    taken = celery("durable", "fork", origin.id, "--from-step", "1", "--workflow-id", fork_id)
    assert taken.returncode == 1 and f"a run with id {fork_id!r} already exists" in taken.stderr
    with caplog.at_level(logging.INFO, logger="celery_durable.operations"):
        named = origin.fork(from_step=4, run_id=f"fork-{key}")
    assert named.id == f"fork-{key}" and named.get(timeout=30) == ["1@v1", "2@v1", "3@v1", "4@v1"]
    (line,) = [r for r in caplog.records if r.name == "celery_durable.operations"]
    assert (line.run_id, line.workflow, line.attempt, line.step_index) == (
        named.id,
        FOUR_STEPS,
        0,
        4,
    )
    assert f"forked from run {origin.id} at step 4" in line.getMessage()


def test_gc_deletes_finished_runs_with_their_rows_and_never_a_waiting_one(
    basic_app, shared_worker, key, rds, caplog
):
    store = basic_app.durable.runtime.store
    alive = basic_app.collector.delay(f"{key}-alive", 1)
    wait_until(lambda: alive.status().value == "WAITING", 30, message="the run to wait")
    (failed,) = failed_runs(basic_app, rds, key, 1)
    booked = basic_app.booking.delay(f"{key}-booked", 600)  # ends with a state value
    wait_until(lambda: booked.status().value == "WAITING", 30, message="the booking to wait")
    booked.signal("approval", {"by": "ops"})
    cancelled = basic_app.collector.delay(f"{key}-cancelled", 1)
    wait_until(lambda: cancelled.status().value == "WAITING", 30, message="the run to wait")
    cancelled.signal("unheard", 1)  # a signal row that goes with the run
    cancelled.cancel("not needed")
    finished(booked)
    ours = [failed, booked, cancelled]
    last = max(store.get_run(h.id).finished_at for h in ours)
    wait_until(lambda: store.now() > last + 1.0, 10, message="our runs to be a second old")
    dry = celery("durable", "gc", "--older-than", "1s", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would delete ") and int(dry.stdout.split()[2]) >= 3
    assert all(store.get_status(h.id) for h in ours)  # a dry run deletes nothing
    only_failed = celery("durable", "gc", "--older-than", "1s", "--status", "failed")
    assert only_failed.returncode == 0 and "failed)" in only_failed.stdout
    assert store.get_status(failed.id) is None and store.get_status(booked.id) == "SUCCEEDED"
    done = celery("durable", "gc", "--older-than", "1s")
    assert done.returncode == 0 and done.stdout.startswith("deleted "), done.stderr
    for handle in ours:
        assert rows_of(store, handle.id) == {"runs": 0, "steps": 0, "signals": 0, "state": 0}
    # The waiting run is older than the cutoff too, and untouched: it goes on.
    assert rows_of(store, alive.id) == {"runs": 1, "steps": 2, "signals": 0, "state": 0}
    alive.signal("item", "still here")
    assert alive.get(timeout=30) == ["still here"]
    refused = celery("durable", "gc", "--older-than", "1s", "--status", "waiting")
    assert refused.returncode == 1 and "is never deleted" in refused.stderr
    with caplog.at_level(logging.INFO, logger="celery_durable.operations"):
        collected = basic_app.durable.gc(older_than="1h", status="cancelled")
    assert collected.total == 0 and collected.before is not None
    (line,) = [r for r in caplog.records if r.name == "celery_durable.operations"]
    assert (line.run_id, line.workflow, line.attempt, line.step_index) == (None,) * 4
    assert line.getMessage().startswith("gc deleted 0 finished run(s) older than 1h")


def test_retention_deletes_old_finished_runs_from_the_sweeper(basic_app, start_worker, key, rds):
    store = basic_app.durable.runtime.store
    worker = start_worker(env={"CELERY_DURABLE_RETENTION": "2s"})
    alive = basic_app.collector.delay(f"{key}-alive", 1)
    wait_until(lambda: alive.status().value == "WAITING", 30, message="the run to wait")
    done = basic_app.four_steps.delay(f"{key}-done")
    assert done.get(timeout=30) == ["1@v1", "2@v1", "3@v1", "4@v1"]
    wait_until(lambda: store.get_status(done.id) is None, 60, message="retention to delete it")
    assert rows_of(store, done.id) == {"runs": 0, "steps": 0, "signals": 0, "state": 0}
    assert "retention deleted" in worker.log()
    # Waiting longer than the retention does not make a run old: only finished runs go.
    assert store.now() - store.get_run(alive.id).created_at > 2
    assert rows_of(store, alive.id) == {"runs": 1, "steps": 2, "signals": 0, "state": 0}
    alive.signal("item", "kept")
    assert alive.get(timeout=30) == ["kept"]


def test_a_fork_takes_the_unconsumed_signals_with_it(basic_app, shared_worker, key, rds):
    """Bug: the approval stayed on the failed run, and the fork waited for it again."""
    rds.set(f"block:{key}:s1", "1")
    rds.set(f"bug:{key}", "1")
    origin = basic_app.fails_before_its_wait.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 0 to start")
    assert origin.signal("approval", {"by": "alice"}, idempotency_key="approve-1")
    rds.delete(f"block:{key}:s1")
    wait_until(lambda: origin.status().value == "FAILED", 30, message="the run to fail")
    rds.delete(f"bug:{key}")  # the fix is deployed
    done = celery("durable", "fork", origin.id, "--from-step", "1")
    assert done.returncode == 0, done.stderr
    fork_id = done.stdout.split(":")[0]
    fork = basic_app.durable.get_handle(fork_id)
    assert fork.get(timeout=30) == [10, 20, {"by": "alice"}]
    assert done.stdout.strip() == (
        f"{fork_id}: forked from {origin.id} at step 1 (kept steps 0 to 0), PENDING; "
        "took 1 unconsumed signal ('approval') with it"
    )
    # The origin keeps its own (a resume of it would take it); the fork's copy has the key.
    assert [(s["name"], s["idempotency_key"]) for s in show_json(origin.id)["pending_signals"]] == [
        ("approval", "approve-1")
    ]
    signals = basic_app.durable.runtime.store.tables.signals
    with basic_app.durable.runtime.store.engine.connect() as conn:
        copied = conn.execute(
            sa.select(signals.c.idempotency_key, signals.c.consumed_at).where(
                signals.c.run_id == fork_id
            )
        ).one()
    assert copied.idempotency_key == "approve-1" and copied.consumed_at is not None


def test_a_fork_says_which_consumed_signals_to_resend(basic_app, shared_worker, key):
    origin = basic_app.collector.delay(key, 2)
    wait_until(lambda: origin.status().value == "WAITING", 30, message="the run to wait")
    origin.signal("item", 1)
    wait_until(lambda: len(origin.steps()) == 3, 30, message="the run to wait for the 2nd")
    done = celery("durable", "fork", origin.id, "--from-step", "1")
    assert done.returncode == 0, done.stderr
    fork_id = done.stdout.split(":")[0]
    assert done.stdout.splitlines()[1] == (
        f"step 1 consumed signal 'item' on {origin.id}, and waits for it again in the fork: "
        f"resend it with durable signal {fork_id} item PAYLOAD"
    )
    for handle in (origin, basic_app.durable.get_handle(fork_id)):
        handle.cancel("test over")
