"""patched / deprecate_patch on the embedded default (SQLite, eager): code changed between
two attempts of one run, with the run's history deciding which branch it takes."""

from __future__ import annotations

import pytest

import celery_durable as cd
from celery_durable import InvalidArgument, WorkflowFailed


def _deployable(durable, version: dict[str, str], calls: list[str]):  # type: ignore[no-untyped-def]
    @durable.step
    def old(n: int) -> str:
        calls.append("old")
        return f"old-{n}"

    @durable.step
    def new(n: int) -> str:
        calls.append("new")
        return f"new-{n}"

    @durable.workflow(max_attempts=1)
    def flow(n: int) -> list[str]:
        first = old(n) if version["v"] == "v1" else None
        if version["v"] == "v2":
            first = new(n) if cd.patched("use-new") else old(n)
        if version["v"] == "v3":
            cd.deprecate_patch("use-new")
            first = new(n)
        if version["v"] == "v4":
            first = new(n)
        decision = cd.wait_for_signal("go")
        return [str(first), str(decision)]

    return flow


def test_patched_takes_the_branch_history_recorded(durable):
    version, calls = {"v": "v1"}, []
    flow = _deployable(durable, version, calls)
    before = flow.delay(1)  # passes the patch point on v1, then waits
    version["v"] = "v2"  # the deploy
    after = flow.delay(2)  # reaches the point on v2: records the marker
    before.signal("go", "a")
    after.signal("go", "b")
    assert before.get(timeout=5) == ["old-1", "a"]  # replayed past the point: False
    assert after.get(timeout=5) == ["new-2", "b"]
    assert [s.name for s in after.steps()][0] == "celery_durable.patch:use-new"
    assert calls == ["old", "new"]  # replay re-ran nothing


def test_a_run_that_recorded_the_marker_keeps_true_and_deprecate_keeps_it(durable):
    version, calls = {"v": "v2"}, []
    flow = _deployable(durable, version, calls)
    marked = flow.delay(1)
    version["v"] = "v3"  # deprecate_patch: the old branch is gone
    fresh = flow.delay(2)
    marked.signal("go", "x")
    fresh.signal("go", "y")
    assert marked.get(timeout=5) == ["new-1", "x"]
    assert fresh.get(timeout=5) == ["new-2", "y"]
    # A run started on v3 records the marker too: a rollback to v2 takes the new branch.
    assert fresh.steps()[0].name == "celery_durable.patch:use-new"
    version["v"] = "v4"  # the call removed: a recorded marker is passed over
    late = flow.delay(3)
    version["v"] = "v3"
    other = flow.delay(4)
    version["v"] = "v4"
    late.signal("go", "z")
    other.signal("go", "w")
    assert late.get(timeout=5) == ["new-3", "z"]
    assert other.get(timeout=5) == ["new-4", "w"]


def test_without_patched_the_old_run_fails_naming_patched_and_fork(durable):
    version, calls = {"v": "v1"}, []
    flow = _deployable(durable, version, calls)
    before = flow.delay(1)
    version["v"] = "v4"  # changed without patched()
    before.signal("go", "a")
    with pytest.raises(WorkflowFailed, match="NonDeterminismError") as failed:
        before.get(timeout=5)
    message = failed.value.error_message
    assert "celery_durable.patched(" in message
    assert f"durable fork {before.id} --from-step 0" in message


def test_patched_checks_its_argument_and_context(durable):
    with pytest.raises(RuntimeError, match="inside a workflow"):
        cd.patched("x")

    @durable.workflow(max_attempts=1)
    def bad() -> None:
        cd.patched("")

    with pytest.raises(WorkflowFailed, match=r"patched\(change_id\)"):
        bad.delay().get(timeout=5)
    assert issubclass(InvalidArgument, ValueError)
