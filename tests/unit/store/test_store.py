"""The store's statements on both databases: claim, fencing, settle, sweep, migrations."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from celery_durable.store import Outcome, StepRecord, Store
from celery_durable.store.migrations import current, upgrade
from tests.support.builders import new_run
from tests.support.services import PG_URL, drop_tables, unique
from tests.support.waiting import wait_until


def step(idx: int, output: str = "1") -> StepRecord:
    return StepRecord(idx, "s", "ok", "[[],{}]", output, None)


def test_migrations_are_recorded_in_their_own_version_table(store):
    assert current(store) == "0015"
    upgrade(store)  # idempotent
    names = sa.inspect(store.engine).get_table_names()
    prefix = store.table_prefix
    assert {
        f"{prefix}runs",
        f"{prefix}steps",
        f"{prefix}signals",
        f"{prefix}state",
        f"{prefix}alembic_version",
    } <= set(names)
    indexes = {i["name"] for i in sa.inspect(store.engine).get_indexes(f"{prefix}runs")}
    assert {
        f"ix_{prefix}runs_{name}" for name in ("due", "status", "workflow", "counts")
    } <= indexes


def test_migrate_sql_prints_ddl_with_partial_indexes(store):
    ddl = upgrade(store, sql=True)
    assert f"CREATE TABLE {store.table_prefix}runs" in ddl
    assert "WHERE due_at IS NOT NULL" in ddl


def test_claim_is_exclusive_and_fenced(store):
    assert store.insert_run(new_run("r1"))
    assert not store.insert_run(new_run("r1"))
    first = store.claim_run("r1", "a", lease=30)
    assert first is not None and first.fence > 0 and first.attempts == 1
    assert store.claim_run("r1", "b", lease=30) is None  # live lease
    assert store.record_step("r1", first.fence, step(0)).outcome is Outcome.RECORDED
    assert store.load_steps("r1")[0].output == "1"


def test_stale_fence_cannot_record_or_settle(store):
    store.insert_run(new_run("r2"))
    zombie = store.claim_run("r2", "zombie", lease=0.01)
    assert zombie is not None
    successor = wait_until(lambda: store.claim_run("r2", "successor", lease=30), 10)
    assert successor.fence > zombie.fence  # tokens grow
    assert store.record_step("r2", zombie.fence, step(0)).outcome is Outcome.LEASE_LOST
    assert store.settle_run("r2", zombie.fence, "SUCCEEDED", result="1") is None
    assert store.get_run("r2").status == "RUNNING"
    assert store.get_run("r2").owner == "successor"
    assert store.settle_run("r2", successor.fence, "SUCCEEDED", result="2") == "SUCCEEDED"
    assert store.get_run("r2").result == "2"


def test_step_write_is_insert_or_verify(store):
    store.insert_run(new_run("r3"))
    claim = store.claim_run("r3", "a", lease=30)
    assert store.record_step("r3", claim.fence, step(0, "41")).outcome is Outcome.RECORDED
    again = store.record_step("r3", claim.fence, step(0, "42"))
    assert again.outcome is Outcome.EXISTS
    assert again.stored is not None and again.stored.output == "41"  # the stored row wins
    failed = StepRecord(1, "s", "error", "[[],{}]", None, '{"type":"x"}')
    assert store.record_step("r3", claim.fence, failed).outcome is Outcome.RECORDED
    rerun = store.record_step("r3", claim.fence, step(1, "7"))  # frontier rerun
    assert rerun.outcome is Outcome.RECORDED
    assert store.load_steps("r3")[1].output == "7"


def test_cancel_requested_is_seen_by_the_step_write(store):
    store.insert_run(new_run("r4"))
    claim = store.claim_run("r4", "a", lease=30)
    with store.db.transaction() as conn:
        runs = store.tables.runs
        conn.execute(sa.update(runs).where(runs.c.id == "r4").values(cancel_requested=True))
    assert store.record_step("r4", claim.fence, step(0)).outcome is Outcome.CANCELLED
    # The settle statement checks the flag too: the run ends CANCELLED, not SUCCEEDED.
    assert store.settle_run("r4", claim.fence, "SUCCEEDED", result="1") == "CANCELLED"
    assert store.get_run("r4").result is None


def test_sweep_takes_expired_leases_and_stale_pending_runs(store):
    store.insert_run(new_run("fresh"))
    store.insert_run(new_run("stale", grace=0))
    store.insert_run(new_run("expired"))
    store.claim_run("expired", "dead", lease=0)
    assert store.sweep_due_runs(100, 60, "{}", ["other.workflow"]) == []  # not this app's
    due = {r.id: r.status for r in store.sweep_due_runs(100, 60, "{}", ["wf"])}
    assert due == {"stale": "PENDING", "expired": "PENDING"}
    assert store.sweep_due_runs(100, 60, "{}", ["wf"]) == []  # published once per grace
    expired = store.get_run("expired")
    assert expired.owner is None
    # A lost worker is a recovery, not an attempt: the next claim is attempt 1 again.
    assert (expired.attempts, expired.recoveries) == (0, 1)
    assert store.claim_run("expired", "next", lease=30).attempts == 1


def test_a_run_whose_worker_is_lost_too_often_fails(store):
    store.insert_run(new_run("poison"))
    for n in range(1, 3):
        assert store.claim_run("poison", f"dead-{n}", lease=0, max_recoveries=3) is not None
        due = wait_until(
            lambda: store.sweep_due_runs(
                100, 60, '{"type":"WorkerLost"}', ["wf"], max_recoveries=3
            ),
            10,
        )
        assert [(r.id, r.status) for r in due] == [("poison", "PENDING")]
        assert store.get_run("poison").recoveries == n
    store.claim_run("poison", "dead-3", lease=0, max_recoveries=3)
    # Taking over the expired lease would be a third recovery: the budget is spent.
    assert store.claim_run("poison", "late", lease=0, max_recoveries=3) is None
    due = wait_until(
        lambda: store.sweep_due_runs(100, 60, '{"type":"WorkerLost"}', ["wf"], max_recoveries=3),
        10,
    )
    assert [(r.id, r.status) for r in due] == [("poison", "FAILED")]
    run = store.get_run("poison")
    assert run.error == '{"type":"WorkerLost"}'
    assert (run.attempts, run.recoveries) == (1, 3)  # never a failed attempt of its own


def test_taking_over_an_expired_lease_counts_a_recovery_not_an_attempt(store):
    store.insert_run(new_run("takeover"))
    store.claim_run("takeover", "dead", lease=0)
    claim = wait_until(lambda: store.claim_run("takeover", "next", lease=30), 10)
    assert claim.attempts == 1
    assert store.get_run("takeover").recoveries == 1


def test_retry_backoff_gates_the_claim(store):
    store.insert_run(new_run("later"))
    claim = store.claim_run("later", "a", lease=30)
    assert store.schedule_retry("later", claim.fence, 30.0, '{"type":"x"}')
    assert store.claim_run("later", "b", lease=30) is None  # not before its backoff
    assert store.sweep_due_runs(100, 60, "{}", ["wf"]) == []


def test_heartbeat_renews_only_the_listed_runs_of_the_owner(store):
    for run_id in ("h1", "h2"):
        store.insert_run(new_run(run_id))
        store.claim_run(run_id, "me", lease=1)
    assert store.renew_leases("me", ["h1", "h2"], 60) == {"h1": False, "h2": False}
    assert store.renew_leases("someone-else", ["h1"], 60) == {}
    store.cancel_run("h2", "enough", 5.0)  # running: asked, for the heartbeat to tell it
    assert store.renew_leases("me", ["h1", "h2"], 60) == {"h1": False, "h2": True}
    assert store.release_owner("someone-else", ["h1", "h2"]) == []
    assert sorted(store.release_owner("me", ["h1", "h2"])) == ["h1", "h2"]
    released = store.get_run("h1")
    assert (released.status, released.owner, released.attempts) == ("PENDING", None, 0)
    assert store.release_owner("me", ["h1", "h2"]) == []


def test_concurrent_sweepers_never_share_a_run():
    prefix = unique("c")[:9] + "_"
    store = Store(PG_URL, prefix, "ns")
    upgrade(store)
    try:
        for i in range(200):
            store.insert_run(new_run(f"run-{i}", grace=0))
        taken: list[list[str]] = [[], [], [], []]

        def sweep(slot: int) -> None:
            while batch := store.sweep_due_runs(7, 60, "{}", ["wf"]):
                taken[slot].extend(r.id for r in batch)

        threads = [threading.Thread(target=sweep, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        everything = [run_id for ids in taken for run_id in ids]
        assert sorted(everything) == sorted(f"run-{i}" for i in range(200))
    finally:
        store.dispose()
        drop_tables(PG_URL, prefix)


def test_a_cancelled_run_is_never_claimed_or_retried(store):
    store.insert_run(new_run("c1"))
    claim = store.claim_run("c1", "a", lease=30)
    cancelled = store.cancel_run("c1", "stop")
    assert (cancelled.requested, cancelled.status) == (True, "RUNNING")
    assert store.schedule_retry("c1", claim.fence, 0.0, '{"type":"x"}') == "CANCELLED"
    assert store.get_run("c1").status == "CANCELLED"
    store.insert_run(new_run("c2"))
    dead = store.claim_run("c2", "dead", lease=0)
    store.cancel_run("c2", None)
    assert store.claim_run("c2", "next", lease=30) is None
    assert dead is not None
