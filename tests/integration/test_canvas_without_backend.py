"""Workflows in Celery's canvas on an app with no result backend (tests/apps/basic.py):
a group's members and a chain's are the runs' handles, so ``.get()`` reads the store (a
chain's later run is waited for until it starts); a chord, which Celery counts in a
backend, says it needs one."""

from __future__ import annotations

import pytest
from celery import chain, chord, group
from celery.backends.base import DisabledBackend

from celery_durable import WorkflowFailed, WorkflowHandle, WorkflowStatus

pytestmark = pytest.mark.usefixtures("shared_worker")


def test_a_group_of_workflows_returns_handles_and_gets_through_the_store(basic_app, key):
    assert isinstance(basic_app.app.backend, DisabledBackend)
    joined = group(basic_app.five_steps.s(f"{key}-{n}") for n in range(3)).apply_async()
    assert all(isinstance(member, WorkflowHandle) for member in joined.results)
    assert joined.get(timeout=60) == [[10, 20, 30, 40, 50]] * 3
    assert joined.ready() and joined.successful()
    assert {member.status() for member in joined.results} == {WorkflowStatus.SUCCEEDED}


def test_a_failed_member_fails_the_groups_get_with_its_error(basic_app, key):
    joined = group(basic_app.five_steps.s(key), basic_app.permanent.s(key)).apply_async()
    with pytest.raises(WorkflowFailed, match=f"no way {key}"):
        joined.get(timeout=60)
    assert joined.results[0].get(timeout=60) == [10, 20, 30, 40, 50]


def test_a_chain_of_workflows_gets_its_last_run_which_starts_when_the_first_ends(basic_app, key):
    chained = chain(basic_app.five_steps.s(key), basic_app.context_probe.s()).apply_async()
    assert isinstance(chained, WorkflowHandle) and isinstance(chained.parent, WorkflowHandle)
    assert chained.get(timeout=60) == {
        "id": chained.id,
        "name": basic_app.context_probe.name,
        "active": True,
    }
    assert chained.parent.get(timeout=10) == [10, 20, 30, 40, 50]


def test_a_chord_of_workflows_says_it_needs_a_result_backend(basic_app, key):
    with pytest.raises(NotImplementedError, match="chords requires a result backend"):
        chord([basic_app.five_steps.s(key)], basic_app.five_steps.s()).apply_async()
