"""Starts that name an active run (runs/dedup.py): ``dedup_key`` returns the active run's
handle, frees the key once it finished, raises with ``if_exists="error"``; ``debounce``
moves a pending start and replaces its arguments; bad options are refused naming them."""

from __future__ import annotations

import pytest

import celery_durable as cd
from celery_durable import InvalidArgument, WorkflowAlreadyExists, WorkflowStatus


def test_a_dedup_key_returns_the_active_run_until_it_finishes(durable):
    @durable.workflow
    def sync_user(user: int) -> object:
        return cd.wait_for_signal("go")

    first = sync_user.apply_async((42,), dedup_key="user-42")
    again = sync_user.apply_async((43,), dedup_key="user-42")
    assert again.id == first.id and first.status() is WorkflowStatus.WAITING
    with pytest.raises(WorkflowAlreadyExists, match=first.id):
        sync_user.apply_async((44,), dedup_key="user-42", if_exists="error")
    other = sync_user.apply_async((42,), dedup_key="user-7")
    assert other.id != first.id
    first.signal("go", "done")
    assert first.get(timeout=5) == "done"
    fresh = sync_user.apply_async((42,), dedup_key="user-42")  # the key is free again
    assert fresh.id != first.id and fresh.status() is WorkflowStatus.WAITING


def test_a_debounced_call_moves_the_start_and_replaces_the_arguments(durable):
    @durable.workflow
    def sync_user(user: int) -> int:
        return user

    first = sync_user.apply_async((1,), dedup_key="u", debounce=30)
    created = first.record()
    assert created.status == "PENDING" and created.due_at is not None
    second = sync_user.apply_async((2,), dedup_key="u", debounce=60, debounce_max_wait=45)
    moved = second.record()
    assert second.id == first.id and moved.args == "[[2],{}]"
    # Moved to 60 s from now, but capped at 45 s after the first call.
    assert created.due_at < moved.due_at <= created.created_at + 45.5


def test_bad_dedup_options_are_refused_naming_them(durable):
    @durable.workflow
    def sync_user(user: int) -> int:
        return user

    with pytest.raises(InvalidArgument, match="debounce needs a dedup_key"):
        sync_user.apply_async((1,), debounce=5)
    with pytest.raises(InvalidArgument, match="debounce=-1 is not a duration"):
        sync_user.apply_async((1,), dedup_key="u", debounce=-1)
    with pytest.raises(InvalidArgument, match="dedup_key"):
        sync_user.apply_async((1,), dedup_key="")
