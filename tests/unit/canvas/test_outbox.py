"""The outbox of settled runs (``runs.outbox_at``): written by the statement that finishes a
run with a canvas, taken by the sweeper once a grace old, cleared once reported; on both
databases."""

from __future__ import annotations

from celery_durable.store import Store
from tests.support.builders import new_run

CANVAS = '{"report": true}'


def started(store: Store, run_id: str, canvas: str | None = CANVAS, lease: float = 30) -> int:
    assert store.insert_run(new_run(run_id, canvas=canvas))
    claim = store.claim_run(run_id, "me", lease=lease, max_recoveries=1)
    assert claim is not None and claim.canvas == canvas
    return claim.fence


def owed_now(store: Store) -> list[str]:
    """The entries owed at all (a negative grace: due however young)."""
    return sorted(entry.id for entry in store.canvas.take_owed_reports(grace=-3600, limit=100))


def test_a_settle_owes_a_report_only_for_a_run_with_a_canvas(store):
    store.settle_run("with", started(store, "with"), "SUCCEEDED", result="42")
    store.settle_run("without", started(store, "without", canvas=None), "FAILED", error="{}")
    [entry] = store.canvas.take_owed_reports(grace=-3600, limit=100)
    assert (entry.id, entry.status, entry.result, entry.canvas) == (
        "with",
        "SUCCEEDED",
        "42",
        CANVAS,
    )
    assert owed_now(store) == ["with"]  # taken, not cleared: due again a grace later
    assert store.canvas.take_owed_reports(grace=3600, limit=100) == []
    store.canvas.clear_reported(["with"])
    assert owed_now(store) == []


def test_an_entry_waits_out_the_grace_for_the_worker_that_settled_it(store):
    store.settle_run("young", started(store, "young"), "SUCCEEDED", result="1")
    assert store.canvas.take_owed_reports(grace=3600, limit=100) == []
    assert owed_now(store) == ["young"]


def test_a_retry_owes_nothing_and_a_cancel_of_an_idle_run_owes_its_report(store):
    fence = started(store, "retried")
    assert store.schedule_retry("retried", fence, 0.0, '{"type": "E"}', None, ()) == "PENDING"
    assert store.insert_run(new_run("idle", canvas=CANVAS))
    assert store.cancel_run("idle", "not needed").status == "CANCELLED"
    owed = store.canvas.take_owed_report("idle")
    assert owed is not None and (owed.status, owed.cancel_reason) == ("CANCELLED", "not needed")
    assert store.canvas.take_owed_report("retried") is None
    store.canvas.clear_reported(["idle"])
    assert owed_now(store) == []


def test_a_run_the_sweeper_fails_is_owed_at_once(store):
    started(store, "poison", lease=-1)  # its lease already expired: its worker is lost
    [failed] = store.sweep_due_runs(10, 60.0, '{"type": "WorkerLost"}', ["wf"], max_recoveries=1)
    assert failed.status == "FAILED"
    # No worker will report it: due for the sweeper's report without waiting out the grace.
    [entry] = store.canvas.take_owed_reports(grace=60.0, limit=100)
    assert (entry.id, entry.status) == ("poison", "FAILED")
