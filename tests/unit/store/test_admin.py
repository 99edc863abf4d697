"""The operations' statements on both databases: list (filters, keyset pages), stats."""

from __future__ import annotations

import dataclasses

import pytest

from celery_durable.store import RunFilter, StepRecord, Store
from tests.support.builders import new_run, rows_of
from tests.support.waiting import wait_until

FAILED_ERROR = '{"type":"tests.Boom","message":"boom","traceback":"","args":["boom"]}'


def make(store: Store, run_id: str, name: str, status: str, grace: float = 60.0) -> None:
    """A run of workflow ``name`` brought to ``status`` through the store's own path."""
    store.insert_run(new_run(run_id, name=name, grace=grace))
    if status == "CANCELLED":
        store.cancel_run(run_id, "stop")
        return
    if status == "PENDING":
        return
    claim = store.claim_run(run_id, "worker", lease=30)
    assert claim is not None
    if status == "WAITING":
        waiting = StepRecord(0, "celery_durable.signal:go", "waiting", "[]", "{}", None)
        store.waits.suspend_run(run_id, claim.fence, waiting, "go", None)
    elif status == "SUCCEEDED":
        store.settle_run(run_id, claim.fence, "SUCCEEDED", result="1")
    elif status == "FAILED":
        store.settle_run(run_id, claim.fence, "FAILED", error=FAILED_ERROR)
    assert store.get_status(run_id) == status


def ids(store: Store, run_filter: RunFilter | None = None, limit: int = 100) -> list[str]:
    return [run.id for run in store.list_runs(run_filter or RunFilter(), limit)]


def newest_first(store: Store, run_ids: list[str]) -> list[str]:
    """The order every listing uses: created_at, then id, descending (SQLite's clock has
    millisecond ticks, so runs made in one tick are ordered by id)."""
    runs = [store.get_run(run_id) for run_id in run_ids]
    return [r.id for r in sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)]


MIX = [
    ("ok-a", "wf.a", "SUCCEEDED"),
    ("failed-a", "wf.a", "FAILED"),
    ("failed-b", "wf.b", "FAILED"),
    ("waiting-a", "wf.a", "WAITING"),
    ("pending-b", "wf.b", "PENDING"),
    ("running-a", "wf.a", "RUNNING"),
    ("cancelled-b", "wf.b", "CANCELLED"),
]


def test_list_filters_by_status_workflow_and_creation_time(store):
    for run_id, name, status in MIX:
        make(store, run_id, name, status)
    everything = newest_first(store, [run_id for run_id, _, _ in MIX])
    assert ids(store) == everything
    assert ids(store, RunFilter(statuses=("FAILED",))) == newest_first(
        store, ["failed-a", "failed-b"]
    )
    assert ids(store, RunFilter(statuses=("FAILED",), workflow="wf.a")) == ["failed-a"]
    assert sorted(ids(store, RunFilter(statuses=("PENDING", "RUNNING")))) == [
        "pending-b",
        "running-a",
    ]
    assert sorted(ids(store, RunFilter(statuses=("WAITING", "CANCELLED")))) == [
        "cancelled-b",
        "waiting-a",
    ]
    assert sorted(ids(store, RunFilter(workflow="wf.b"))) == [
        "cancelled-b",
        "failed-b",
        "pending-b",
    ]
    assert ids(store, RunFilter(workflow="wf.none")) == []
    # since is inclusive, until exclusive, both on created_at.
    middle = store.get_run(everything[3]).created_at
    assert set(ids(store, RunFilter(since=middle))) == {
        r for r in everything if store.get_run(r).created_at >= middle
    }
    assert set(ids(store, RunFilter(until=middle))) == {
        r for r in everything if store.get_run(r).created_at < middle
    }
    failed = store.list_runs(RunFilter(statuses=("FAILED",), workflow="wf.b"), 10)[0]
    assert (failed.status, failed.attempts, failed.error) == ("FAILED", 1, FAILED_ERROR)


def test_pages_follow_the_keyset_and_never_repeat_or_skip(store):
    for i in range(23):
        make(store, f"run-{i:02d}", "wf.a" if i % 3 else "wf.b", "SUCCEEDED" if i % 2 else "FAILED")
    everything = ids(store)
    seen: list[str] = []
    after = None
    while True:
        page = store.list_runs(RunFilter(after=after), 5)
        seen += [run.id for run in page]
        if len(page) < 5:
            break
        after = (page[-1].created_at, page[-1].id)
    assert seen == everything and len(seen) == 23


def test_the_cursor_is_stable_while_new_runs_are_inserted(store):
    for i in range(6):
        make(store, f"old-{i}", "wf.a", "FAILED")
    before = ids(store, RunFilter(statuses=("FAILED",)))
    first = store.list_runs(RunFilter(statuses=("FAILED",)), 3)
    last = first[-1]
    # New runs are stamped by the database clock, which has moved past every listed run.
    newest = store.get_run(before[0]).created_at
    wait_until(lambda: store.now() > newest, 5, message="the database clock to move on")
    for i in range(4):
        make(store, f"new-{i}", "wf.a", "FAILED")
    rest = ids(store, RunFilter(statuses=("FAILED",), after=(last.created_at, last.id)))
    assert [run.id for run in first] + rest == before  # no repeat, no skip, none new
    assert set(ids(store, RunFilter(statuses=("FAILED",)), limit=4)) == {
        f"new-{i}" for i in range(4)
    }


def test_stats_count_by_workflow_and_status(store):
    for run_id, name, status in MIX:
        make(store, run_id, name, status)
    make(store, "failed-a2", "wf.a", "FAILED")
    make(store, "due-b", "wf.b", "PENDING", grace=0)  # never picked up: due for the sweeper
    store.insert_run(new_run("lost-a", name="wf.a"))
    store.claim_run("lost-a", "dead", lease=0)
    wait_until(lambda: store.claim_run("lost-a", "next", lease=30), 10)  # a recovery
    stats = store.run_stats()
    counts = {(c.workflow, c.status): (c.runs, c.recoveries) for c in stats.counts}
    assert counts == {
        ("wf.a", "SUCCEEDED"): (1, None),
        ("wf.a", "FAILED"): (2, None),
        ("wf.a", "WAITING"): (1, None),
        ("wf.a", "RUNNING"): (2, 1),
        ("wf.b", "FAILED"): (1, None),
        ("wf.b", "PENDING"): (2, 0),
        ("wf.b", "CANCELLED"): (1, None),
    }
    assert stats.oldest_pending is not None and stats.oldest_pending.id == "pending-b"
    assert stats.oldest_waiting is not None and stats.oldest_waiting.id == "waiting-a"
    assert stats.oldest_waiting.wait_signal == "go"
    assert stats.due == 1 and stats.oldest_due_at is not None
    assert stats.oldest_due_at <= stats.now


@pytest.mark.parametrize(
    ("what", "run_filter"),
    [
        ("list", RunFilter()),
        ("list", RunFilter(statuses=("FAILED",), workflow="wf.a", after=(1e12, "z"))),
        ("list", RunFilter(statuses=("WAITING", "SUCCEEDED"), since=0.0, until=1e12)),
        ("list", RunFilter(statuses=("PENDING", "RUNNING"), workflow="wf.b")),
        ("stats", None),
    ],
)
def test_list_and_stats_never_scan_the_runs_table(store, what, run_filter):
    for run_id, name, status in MIX:
        make(store, run_id, name, status)
    # With a handful of rows a sequential scan is cheapest: forbid it (Postgres), so the plan
    # shows whether indexes can serve every branch; the benchmark checks which index the
    # planner picks with a million runs.
    plan = store.explain(what, run_filter, prefer_indexes=True)
    runs = store.tables.runs.name
    assert "Seq Scan" not in plan and f"SCAN {runs}" not in plan, plan
    assert f"ix_{store.table_prefix}runs_" in plan, plan


def test_a_step_keeps_its_duration_and_a_wait_is_timed_by_the_database(store):
    store.insert_run(new_run("timed"))
    claim = store.claim_run("timed", "w", lease=30)
    store.record_step("timed", claim.fence, StepRecord(0, "s", "ok", "[]", "1", None, 0.25))
    waiting = StepRecord(1, "celery_durable.signal:go", "waiting", "[]", "{}", None)
    assert store.waits.suspend_run("timed", claim.fence, waiting, "go", None).value == "suspended"
    suspended_at = store.now()
    wait_until(lambda: store.now() > suspended_at + 0.05, 5, message="the clock to move on")
    assert store.wake_run("timed", "go", 60) is not None
    claim = store.claim_run("timed", "w", lease=30)
    resumed = StepRecord(1, "celery_durable.signal:go", "ok", "[]", '"payload"', None, 0.0)
    store.record_step("timed", claim.fence, resumed)
    steps = store.load_steps("timed")
    assert steps[0].duration == 0.25
    assert steps[1].status == "ok" and steps[1].duration > 0.05  # suspended to resumed


def failed_at(store: Store, run_id: str, error: str, steps: list[StepRecord]) -> None:
    """A run that recorded ``steps`` and settled FAILED with ``error``."""
    store.insert_run(new_run(run_id))
    claim = store.claim_run(run_id, "w", lease=30)
    for step in steps:
        store.record_step(run_id, claim.fence, step)
    store.settle_run(run_id, claim.fence, "FAILED", error=error)


def failure(idx: int) -> StepRecord:
    return StepRecord(idx, "s", "error", "[]", None, '{"type":"x.Bug","message":"bug"}', 0.1)


@pytest.mark.parametrize(
    ("error", "kept"),
    [
        ('{"type":"x.Bug","message":"bug","step":1}', [0]),  # step 1 ended the run
        ('{"type":"x.Other","message":"body","step":null}', [0, 1]),  # caught; body failed
        ('{"type":"x.Bug","message":"bug"}', [0]),  # older error: the failed frontier step
    ],
)
def test_resume_keeps_the_steps_but_the_failure_that_ended_the_run(store, error, kept):
    failed_at(store, "r", error, [StepRecord(0, "s", "ok", "[]", "1", None, 0.1), failure(1)])
    resumed = store.resume_run("r", grace=60)
    assert resumed.status == "FAILED" and resumed.run is not None and resumed.run.id == "r"
    assert resumed.attempts == 1 and resumed.from_step == len(kept)
    assert sorted(store.load_steps("r")) == kept
    run = store.get_run("r")
    assert (run.status, run.attempts, run.error, run.finished_at) == ("PENDING", 0, None, None)
    claim = store.claim_run("r", "next", lease=30)
    assert claim is not None and claim.attempts == 1  # a fresh attempt budget


def test_resume_refuses_what_is_not_failed_or_cancelled(store):
    make(store, "running", "wf", "RUNNING")
    make(store, "ok", "wf", "SUCCEEDED")
    make(store, "cancelled", "wf", "CANCELLED")
    assert store.resume_run("running", grace=60).status == "RUNNING"
    assert store.resume_run("running", grace=60).run is None
    assert store.resume_run("ok", grace=60).run is None
    assert store.resume_run("missing", grace=60).status is None
    assert store.resume_run("cancelled", grace=60).run is not None
    assert store.resume_run("cancelled", grace=60).status == "PENDING"  # once only
    assert store.get_run("cancelled").cancel_requested is False


def test_fork_copies_the_steps_before_the_fork_and_links_its_origin(store):
    ok = [StepRecord(i, f"s{i}", "ok", f"[{i}]", str(i), None, 0.1) for i in range(3)]
    failed_at(store, "origin", '{"type":"x.Bug","message":"bug","step":3}', [*ok, failure(3)])
    forked = store.fork_run("origin", "fork", 2, grace=60)
    assert forked.status == "FAILED" and forked.finished == 3  # step 3 ended it: not kept
    assert forked.run is not None and forked.run.id == "fork" and forked.run.status == "PENDING"
    kept = list(store.load_steps("fork").values())
    assert [dataclasses.replace(s, started_at=None, attempt=None) for s in kept] == ok[:2]
    # Copied as they were: when, and in which attempt, the origin ran them.
    assert kept == list(store.load_steps("origin").values())[:2]
    run, origin = store.get_run("fork"), store.get_run("origin")
    assert (run.forked_from, run.forked_from_step) == ("origin", 2)
    assert (run.name, run.args, run.max_attempts) == (origin.name, origin.args, origin.max_attempts)
    assert store.claim_run("fork", "w", lease=30).attempts == 1
    assert sorted(store.load_steps("origin")) == [0, 1, 2, 3]  # the origin is untouched
    everything = store.fork_run("origin", "fork-3", 3, grace=60)
    assert everything.run is not None and sorted(store.load_steps("fork-3")) == [0, 1, 2]


def test_fork_takes_a_copy_of_the_unconsumed_signals_in_order(store):
    store.insert_run(new_run("origin"))
    claim = store.claim_run("origin", "w", lease=30)
    for name, key in (("a", "k-a"), ("b", "k-b"), ("a", None), ("c", "k-c")):
        store.waits.insert_signal("origin", name, f'"{name}"', key, 100)
    wait = StepRecord(0, "w", "ok", "[]", None, None)
    taken = store.waits.consume_signal("origin", claim.fence, "a", wait)
    assert taken.payload == '"a"'  # the first "a" is consumed: not carried
    store.waits.reject_signal("origin", "late", '"x"', None, "refused", 100)  # kept, never pending
    store.settle_run("origin", claim.fence, "FAILED", error='{"type":"x.Bug","message":"bug"}')
    forked = store.fork_run("origin", "fork", 1, grace=60)
    assert forked.run is not None and forked.signals == ("b", "a", "c")
    carried = [(s.name, s.idempotency_key) for s in store.pending_signals("fork")]
    assert carried == [("b", "k-b"), ("a", None), ("c", "k-c")]
    assert len(store.pending_signals("origin")) == 3  # the origin keeps its own


def test_fork_refuses_a_step_beyond_the_finished_ones_and_a_taken_id(store):
    ok = [StepRecord(i, "s", "ok", "[]", "1", None, 0.1) for i in range(2)]
    failed_at(store, "origin", '{"type":"x.Bug","message":"bug","step":2}', [*ok, failure(2)])
    beyond = store.fork_run("origin", "fork", 3, grace=60)
    assert (beyond.run, beyond.finished, beyond.taken) == (None, 2, False)
    assert store.get_run("fork") is None
    taken = store.fork_run("origin", "origin", 1, grace=60)
    assert taken.run is None and taken.taken
    assert store.fork_run("missing", "fork", 0, grace=60).status is None


def with_rows(store: Store, run_id: str, status: str) -> None:
    """A run with a step, a state value and a signal, brought to ``status``."""
    store.insert_run(new_run(run_id))
    claim = store.claim_run(run_id, "w", lease=30)
    store.record_step(run_id, claim.fence, StepRecord(0, "s", "ok", "[]", "1", None, 0.1))
    store.waits.set_state(run_id, claim.fence, "state", '"x"')
    store.waits.insert_signal(run_id, "later", "1", None, 10)
    if status == "WAITING":
        waiting = StepRecord(1, "celery_durable.signal:go", "waiting", "[]", "{}", None)
        store.waits.suspend_run(run_id, claim.fence, waiting, "go", None)
    elif status == "CANCELLED":
        store.settle_run(run_id, claim.fence, "CANCELLED")
    elif status != "RUNNING":
        store.settle_run(run_id, claim.fence, status, error=FAILED_ERROR)
    assert store.get_status(run_id) == status


def test_gc_deletes_finished_runs_with_their_rows_in_batches_and_nothing_alive(store):
    for i in range(5):
        with_rows(store, f"ok-{i}", "SUCCEEDED")
    with_rows(store, "failed", "FAILED")
    with_rows(store, "cancelled", "CANCELLED")
    for alive in ("RUNNING", "WAITING"):
        with_rows(store, alive.lower(), alive)
    make(store, "pending", "wf", "PENDING")
    cutoff = store.now() + 1  # everything above finished before it
    counted = store.count_collectable("SUCCEEDED", cutoff)
    assert (counted.runs, counted.steps, counted.signals, counted.state) == (
        {"SUCCEEDED": 5},
        5,
        5,
        5,
    )
    first = store.gc_runs("SUCCEEDED", cutoff, batch=2)
    assert (first.runs, first.steps, first.signals, first.state) == ({"SUCCEEDED": 2}, 2, 2, 2)
    assert store.gc_runs("SUCCEEDED", cutoff, batch=2).total == 2
    assert store.gc_runs("SUCCEEDED", cutoff, batch=2).total == 1
    assert store.gc_runs("SUCCEEDED", cutoff, batch=2).total == 0
    for status in ("FAILED", "CANCELLED"):
        assert store.gc_runs(status, cutoff, batch=10).total == 1
    for gone in ("ok-0", "ok-4", "failed", "cancelled"):
        assert rows_of(store, gone) == {"runs": 0, "steps": 0, "signals": 0, "state": 0}
    assert rows_of(store, "waiting") == {"runs": 1, "steps": 2, "signals": 1, "state": 1}
    assert rows_of(store, "running") == {"runs": 1, "steps": 1, "signals": 1, "state": 1}
    assert store.get_status("pending") == "PENDING"


def test_gc_keeps_runs_that_finished_after_the_cutoff(store):
    make(store, "old", "wf", "FAILED")
    store.insert_run(new_run("slow"))  # created before the cutoff...
    # SQLite's clock has millisecond steps: "old" must finish strictly before the cutoff.
    made = store.now()
    wait_until(lambda: store.now() > made, 5, message="the clock to move on")
    cutoff = store.now()
    wait_until(lambda: store.now() > cutoff, 5, message="the clock to move on")
    claim = store.claim_run("slow", "w", lease=30)
    store.settle_run("slow", claim.fence, "FAILED", error=FAILED_ERROR)  # ...finished after
    assert store.count_collectable("FAILED", cutoff).runs == {"FAILED": 1}
    assert store.gc_runs("FAILED", cutoff, batch=10).runs == {"FAILED": 1}
    assert store.get_status("old") is None and store.get_status("slow") == "FAILED"


def test_actions_are_kept_per_run_in_order_and_go_with_the_run(store):
    make(store, "acted", "wf", "CANCELLED")
    make(store, "alive", "wf", "PENDING")
    store.record_action("acted", "cancel", "alice", "out of stock")
    store.record_action("acted", "resume", None)
    store.record_action("alive", "signal", "bob", "approval")
    actions = store.run_actions("acted")
    assert [(a.action, a.actor, a.detail) for a in actions] == [
        ("cancel", "alice", "out of stock"),
        ("resume", None, None),
    ]
    assert actions[0].created_at <= actions[1].created_at <= store.now()
    assert store.gc_runs("CANCELLED", store.now() + 1, batch=10).runs == {"CANCELLED": 1}
    assert store.run_actions("acted") == []
    assert [a.actor for a in store.run_actions("alive")] == ["bob"]
