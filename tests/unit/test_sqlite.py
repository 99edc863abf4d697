"""The embedded default: SQLite store, Celery in eager mode (no broker, no worker)."""

from __future__ import annotations

import pytest
from celery import Celery

import celery_durable as cd
from celery_durable import Durable, NonDeterminismError, WorkflowFailed, WorkflowStatus


def test_workflow_records_steps_and_replays_them(durable):
    calls: list[int] = []

    @durable.step
    def double(n: int) -> int:
        calls.append(n)
        return n * 2

    @durable.workflow(max_attempts=2, retry_backoff=0)
    def pipeline(n: int) -> int:
        total = double(n) + double(n + 1)
        cd.set_state({"total": total})
        return total

    handle = pipeline.delay(5)
    assert handle.status() is WorkflowStatus.SUCCEEDED
    assert handle.get(timeout=5) == 22 and calls == [5, 6]
    assert handle.query() == {"total": 22}
    assert [s.output for s in durable.runtime.store.load_steps(handle.id).values()] == ["10", "12"]


def test_retry_then_replay_on_sqlite(durable):
    calls: list[str] = []

    @durable.step
    def fetch() -> str:
        calls.append("fetch")
        return "data"

    @durable.workflow(max_attempts=2, retry_backoff=0)
    def fragile() -> str:
        value = fetch()
        if calls.count("body") == 0:
            calls.append("body")
            raise RuntimeError("first attempt fails")
        return value

    handle = fragile.delay()
    assert handle.status() is WorkflowStatus.PENDING  # retry scheduled in the database
    durable.runtime.sweeper.sweep_once()  # republishes: eager mode runs it at once
    assert handle.get(timeout=5) == "data"
    assert calls == ["fetch", "body"]  # fetch was replayed, not re-run


def test_determinism_guard_on_sqlite(durable):
    @durable.step
    def a() -> int:
        return 1

    @durable.step
    def b() -> int:
        return 2

    flip = {"first": True}

    @durable.workflow(max_attempts=3, retry_backoff=0)
    def drifting() -> None:
        first, flip["first"] = flip["first"], False
        (a if first else b)()
        raise RuntimeError("retry")

    handle = drifting.delay()
    durable.runtime.sweeper.sweep_once()
    with pytest.raises(WorkflowFailed, match="NonDeterminismError") as failed:
        handle.get(timeout=5)
    assert "step 0" in failed.value.error_message
    assert NonDeterminismError.__name__ in failed.value.error_type


def test_sleep_suspends_and_the_sweeper_fires_the_timer(durable):
    @durable.workflow
    def nap() -> str:
        cd.sleep(0.05)
        return "rested"

    handle = nap.delay()
    assert handle.status() is WorkflowStatus.WAITING
    assert handle.record().owner is None

    def fired() -> bool:
        durable.runtime.sweeper.sweep_once()
        return handle.status() is WorkflowStatus.SUCCEEDED

    from tests.support.waiting import wait_until

    wait_until(fired, 10, message="the timer to fire")
    assert handle.get(timeout=5) == "rested"


def test_steps_in_finally_blocks_do_not_run_once_the_body_must_stop(durable):
    released: list[str] = []

    @durable.step
    def release(what: str) -> None:
        released.append(what)

    @durable.workflow
    def holds() -> None:
        try:
            cd.wait_for_signal("go")
        finally:
            release("hold")  # runs for real only when the body really finishes

    handle = holds.delay()
    assert handle.status() is WorkflowStatus.WAITING  # suspended, not "lease lost"
    assert released == []
    assert [s.status for s in durable.runtime.store.load_steps(handle.id).values()] == ["waiting"]


def test_a_caught_step_failure_is_final_even_at_the_frontier(durable):
    runs: list[str] = []

    @durable.step
    def charge() -> str:
        runs.append("charge")
        raise ValueError("card declined")

    @durable.workflow(max_attempts=2, retry_backoff=0)
    def checkout() -> str:
        try:
            charge()
        except ValueError:
            outcome = "declined, handled"
        if runs.count("body") == 0:
            runs.append("body")
            raise RuntimeError("crash before the next step is recorded")
        return outcome

    handle = checkout.delay()
    durable.runtime.sweeper.sweep_once()
    assert handle.get(timeout=5) == "declined, handled"
    assert runs.count("charge") == 1  # replayed as the same exception, not charged again


def test_bare_apply_and_bad_start_options_are_refused_with_the_workflow_named(durable):
    @durable.workflow
    def lonely() -> None:
        return None

    with pytest.raises(TypeError, match="lonely.*apply"):
        lonely.apply()
    with pytest.raises(TypeError, match="lonely.*countdown must be a finite number"):
        lonely.apply_async(countdown=float("inf"))
    with pytest.raises(TypeError, match="lonely.*countdown"):
        lonely.apply_async(countdown=True)
    with pytest.raises(ValueError, match="lonely.*differ"):
        lonely.apply_async(run_id="a", task_id="b")
    with pytest.raises(ValueError, match="lonely: run_id='a' and workflow_id='b' differ"):
        lonely.apply_async(run_id="a", workflow_id="b")


def test_workflow_id_is_the_older_name_of_run_id_and_still_works(durable):
    """``workflow_id`` was the run id's public name: as a start option, on a handle, in a
    body's context and on errors it is an alias of ``run_id``."""
    seen: list[tuple[str, str]] = []

    @durable.workflow
    def named() -> str:
        ctx = cd.WorkflowContext.current()
        assert ctx is not None
        seen.append((ctx.run_id, ctx.workflow_id))
        return "done"

    handle = named.apply_async(workflow_id="older-name")
    assert (handle.run_id, handle.workflow_id, handle.id) == ("older-name",) * 3
    assert seen == [("older-name", "older-name")]
    assert named.apply_async(workflow_id="older-name", if_exists="return") == handle
    with pytest.raises(cd.WorkflowAlreadyExists) as taken:
        named.apply_async(run_id="older-name")
    assert taken.value.run_id == taken.value.workflow_id == "older-name"
    forked = handle.fork(0, workflow_id="older-fork")
    assert forked.run_id == "older-fork"


def test_link_and_link_error_fire_once_the_run_settles_in_eager_mode(durable):
    seen: list[tuple[str, object]] = []

    @durable.app.task
    def noted(value: object, tag: str) -> None:
        seen.append((tag, value))

    @durable.app.task
    def failed_with(request: object, exc: BaseException, traceback: object) -> None:
        seen.append(("errback", type(exc).__name__))

    @durable.workflow(max_attempts=1)
    def doubled(n: int) -> int:
        return 2 * n

    @durable.workflow(max_attempts=1)
    def broken() -> None:
        raise KeyError("no such order")

    @durable.workflow
    def approval() -> object:
        return cd.wait_for_signal("approved")

    doubled.apply_async((21,), link=noted.s("linked"), link_error=failed_with.s())
    broken.apply_async(link=noted.s("never"), link_error=failed_with.s())
    waiting = approval.apply_async(link=noted.s("never"), link_error=failed_with.s())
    assert seen == [("linked", 42), ("errback", "KeyError")]
    waiting.cancel("not needed")
    assert seen[2:] == [("errback", "WorkflowCancelled")]
    # each reported once
    assert durable.runtime.store.canvas.take_owed_reports(grace=-60, limit=10) == []


def test_lease_keeper_counts_nested_tracking(durable):
    keeper = durable.runtime.leases
    keeper.track("r")
    keeper.track("r")
    keeper.untrack("r")
    assert keeper.running() == ["r"]
    keeper.untrack("r")
    assert keeper.running() == []


def test_signals_queries_and_cancel_in_eager_mode(durable):
    @durable.workflow
    def approval(order: str) -> dict:
        cd.set_state({"stage": "waiting"})
        decision = cd.wait_for_signal("approval", timeout=60)
        return {"order": order, "by": decision["by"]}

    handle = approval.delay("o-1")
    assert handle.status() is WorkflowStatus.WAITING
    assert handle.query() == {"stage": "waiting"}
    assert handle.signal("approval", {"by": "alice"}, idempotency_key="k")
    assert not handle.signal("approval", {"by": "alice"}, idempotency_key="k")
    assert handle.get(timeout=5) == {"order": "o-1", "by": "alice"}

    via_broker = approval.delay("o-2")
    durable.send_signal(via_broker.id, "approval", {"by": "bob"})
    assert via_broker.get(timeout=5) == {"order": "o-2", "by": "bob"}

    cancelled = approval.delay("o-3")
    assert cancelled.cancel("gone") is WorkflowStatus.CANCELLED
    with pytest.raises(cd.WorkflowCancelled, match="gone"):
        cancelled.get(timeout=5)


def test_missing_tables_name_the_command_to_run(tmp_path, monkeypatch):
    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    app = Celery("unmigrated", broker="memory://")
    app.conf.task_always_eager = True
    durable = Durable(app, database_url=f"sqlite:///{tmp_path}/empty.sqlite3")

    @durable.workflow
    def nothing() -> None:
        return None

    with pytest.raises(cd.ConfigurationError, match="durable migrate"):
        nothing.delay()


def test_values_json_cannot_hold_fail_at_once_naming_the_culprit(durable):
    @durable.step
    def takes(value: object) -> None:
        return None

    @durable.workflow(max_attempts=3, retry_backoff=0)
    def bad_result() -> object:
        return object()

    @durable.workflow(max_attempts=3, retry_backoff=0)
    def bad_step_argument() -> None:
        takes(object())

    for workflow, culprit in (
        (bad_result, "return value of workflow"),
        (bad_step_argument, "argument 'value' of step"),
    ):
        handle = workflow.delay()
        with pytest.raises(WorkflowFailed, match=culprit) as failed:
            handle.get(timeout=5)
        assert failed.value.error_type == "celery_durable.errors.NotSerialisable"
        assert handle.record().attempts == 1  # not retried
