"""A fan-out's record and its items (or its child run) inserted in one transaction, then
the items published in rounds (``step.start``, ``cd.map``, children all go through here).

Example::

    insert_and_publish(ctx, StepRecord(3, "resize", "started", '"cd.map"', None, None),
                       "resize", None, ['[["a.png"],{}]', '[["b.png"],{}]'])
"""

from __future__ import annotations

from celery_durable.body.context import WorkflowContext
from celery_durable.body.replay import check_replay, stop_writing, store_guard
from celery_durable.core import faults
from celery_durable.errors import WorkflowAlreadyExists
from celery_durable.fanout.items import ITEMS_PER_ROUND
from celery_durable.fanout.store_area import FANOUT
from celery_durable.store import FanOut, Outcome, StepRecord

WING = "fanout"  # the fan-out steps this delivery wrote, among its context's wing states


def fresh_steps(ctx: WorkflowContext) -> set[int]:
    """Fan-out steps inserted by this execution (not replayed): waiting on them tries to
    suspend before reading their items, which have most likely not settled yet."""
    fresh: set[int] = ctx.wing_state(WING, set)
    return fresh


def insert_and_publish(
    ctx: WorkflowContext,
    step: StepRecord,
    name: str,
    queue: str | None,
    inputs: list[str],
    batch_size: int = 1,
) -> None:
    """Record the fan-out with its items in one transaction, then publish them in rounds
    of about ITEMS_PER_ROUND items, ``batch_size`` items to a task."""
    dispatch = ctx.dispatch
    assert dispatch is not None, "a workflow body always runs with a dispatch"
    queue = queue or ctx.queue
    fan = FanOut(name, queue, inputs, dispatch.dispatch_grace, batch_size=batch_size)
    if not write_fanout(ctx, step, fan):
        return
    # A whole number of task batches per round: no batch is split across two rounds.
    per_round = max(ITEMS_PER_ROUND // batch_size, 1) * batch_size
    for number, start in enumerate(range(0, len(inputs), per_round)):
        items = range(start, min(start + per_round, len(inputs)))
        # A crash between rounds leaves the rest pending: the sweeper publishes them
        # after durable_dispatch_grace; replay never dispatches a recorded fan-out again.
        dispatch.publish_items(name, queue, ctx.run_id, step.idx, items, batch_size)
        faults.reach(faults.AFTER_DISPATCH, **ctx.log_fields(step.idx), batch=number)


def write_fanout(ctx: WorkflowContext, step: StepRecord, fan: FanOut) -> bool:
    """Write the fan-out; True when this call wrote it (so its items are to publish)."""
    with store_guard(ctx):
        written = FANOUT.of(ctx.store).insert_fanout(
            ctx.run_id, ctx.fence, step, fan, ctx.take_deferred()
        )
    if written.outcome is Outcome.RECORDED:
        ctx.history[step.idx] = step
        fresh_steps(ctx).add(step.idx)
        return True
    if written.outcome is Outcome.DUPLICATE:
        assert fan.child is not None
        raise WorkflowAlreadyExists(fan.child.id)
    if written.outcome is Outcome.EXISTS and written.stored is not None:
        # An earlier write committed (e.g. interrupted after the server's commit): its
        # unpublished items are the sweeper's, after the dispatch grace.
        check_replay(ctx, step.idx, written.stored, step.name, step.input)
        ctx.history[step.idx] = written.stored
        return False
    stop_writing(ctx)
