"""Changing a workflow's code under runs in flight: ``patched`` and ``deprecate_patch``.

``patched(change_id)`` is recorded as a marker step at its point in history. A run that
reaches that point on the new code records it and gets True, then and on every replay. A
run that had already passed that point before the deploy finds another step (or its
history's end after it) there, and gets False: it keeps taking the old branch.

Example (the deploy, then the cleanup once no old run is left)::

    @durable.workflow
    def checkout(order_id: int) -> dict:
        if cd.patched("tax-v2"):
            amount = price_with_tax(order_id)
        else:
            amount = price(order_id)            # only for runs started before the deploy
        ...

    # later, when no run without the marker is in flight:
        cd.deprecate_patch("tax-v2")
        amount = price_with_tax(order_id)
"""

from __future__ import annotations

from celery_durable.body.context import PATCH_STEP_PREFIX, WorkflowContext, enter_body
from celery_durable.body.replay import record, write_caught_failure
from celery_durable.core import validate
from celery_durable.store import StepRecord


def patched(change_id: str) -> bool:
    """True when this run takes the new code at this point (recorded; True on every
    replay), False when it passed this point on the code before ``change_id``."""
    ctx = _marker_context("patched", change_id)
    if _replayed_marker(ctx, change_id):
        return True
    if ctx.next_index in ctx.history:
        # History goes on at this point without the marker: the old code ran here.
        return False
    _record_marker(ctx, change_id)
    return True


def deprecate_patch(change_id: str) -> None:
    """Keep only the new branch of ``patched(change_id)``: runs that recorded the marker
    replay it, runs that did not go on (no NonDeterminismError); new runs record it, so
    a rollback to the code with ``patched`` still takes the new branch for them.

    Deploy it once no run in flight passed the patch point without the marker; remove it
    once no run in flight holds the marker either.
    """
    ctx = _marker_context("deprecate_patch", change_id)
    if _replayed_marker(ctx, change_id) or ctx.next_index in ctx.history:
        return
    _record_marker(ctx, change_id)


def _marker_context(function: str, change_id: str) -> WorkflowContext:
    validate.check_text(change_id, f"{function}(change_id)", max_chars=200, allow_empty=False)
    return enter_body(f"celery_durable.{function}()")


def _replayed_marker(ctx: WorkflowContext, change_id: str) -> bool:
    """Consume ``change_id``'s marker if history holds it among the markers here."""
    wanted = PATCH_STEP_PREFIX + change_id
    probe = ctx.next_index
    while (found := ctx.history.get(probe)) is not None and found.name.startswith(
        PATCH_STEP_PREFIX
    ):
        if found.name == wanted:
            ctx.next_index = probe + 1
            return True
        probe += 1
    return False


def _record_marker(ctx: WorkflowContext, change_id: str) -> None:
    write_caught_failure(ctx)
    index = ctx.take_index()
    record(ctx, StepRecord(index, PATCH_STEP_PREFIX + change_id, "ok", "[]", "true", None, 0.0))
