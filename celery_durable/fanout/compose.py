"""Composition inside a workflow body: starting parallel steps, steps on other queues and
children (waiting for them is ``fanin``).

A fan-out takes one step index. Its step row is recorded "started" together with its
items (one per parallel call, or the child run) in one transaction; the items then run as
ordinary Celery tasks, each recording its own outcome. Item task ids and child workflow
ids are derived from the run id and the step index, so a replay or re-dispatch is the
same task; replay never dispatches a recorded fan-out again.

Example::

    import celery_durable as cd

    @durable.workflow
    def report(doc_id: str) -> dict:
        images = cd.map(render, range(10))                       # one task per item, in order
        a, b = cd.gather(fetch.start("a"), fetch.start("b"))     # futures, gathered
        child = ship.start_child(doc_id)                         # a child workflow
        return {"images": images, "a": a, "b": b, "shipped": child.result()}
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from celery_durable.body.context import WorkflowContext, enter_body
from celery_durable.body.event_loop import awaited_wait, in_async_body
from celery_durable.body.replay import (
    check_replay,
    record,
    write_caught_failure,
)
from celery_durable.body.step import Step
from celery_durable.core import faults, serialization
from celery_durable.core.ids import derived_id
from celery_durable.core.logs import log_started
from celery_durable.errors import InvalidArgument, NonDeterminismError, RunLimitExceeded
from celery_durable.fanout.fanin import (
    ChildHandle,
    StepFuture,
    collect,
    gather,
    wait_for,
)
from celery_durable.fanout.insert import insert_and_publish, write_fanout
from celery_durable.store import FanOut, NewRun, StepRecord
from celery_durable.store.areas import FENCED_WRITES

R = TypeVar("R")

__all__ = ["ChildHandle", "StepFuture", "gather", "map", "start_child", "start_step"]

CHILD_STEP_PREFIX = "celery_durable.child:"


# -- starting -------------------------------------------------------------------------------


def start_step(
    ctx: WorkflowContext,
    index: int,
    step: Step[Any, R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> StepFuture[R]:
    """``step.start(...)`` (``Step.starter``, set in durable.py) at step ``index``: the
    step as one item, dispatched as a Celery task unless its record is there (replay)."""
    encoded = serialization.encode_arguments(
        f"step {step.name}", step.fn, args, kwargs, ctx.max_payload_bytes, ctx.max_payload_depth
    )
    # "task": a started step and a routed step called directly are the same record, so
    # code may switch between the two without breaking replay.
    step_input = f'{{"fanout":"task","items":1,"input":{encoded}}}'
    recorded = ctx.history.get(index)
    if recorded is not None:
        check_replay(ctx, index, recorded, step.name, step_input)
    else:
        started = StepRecord(index, step.name, "started", step_input, None, None)
        insert_and_publish(ctx, started, step.name, step.options.queue, [encoded])
    return StepFuture(index, step.name)


def map(  # noqa: A001 - cd.map is the public name, like the builtin it mirrors
    step: Step[Any, R],
    *iterables: Iterable[Any],
    return_exceptions: bool = False,
    batch_size: int | str = 1,
) -> Any:
    """Like the builtin ``map(step, *iterables)``, with one Celery task per item (or per
    ``batch_size`` consecutive items, run in order in one worker; ``"auto"`` sizes the
    batches from the item count and the fleet's pool processes): the results in input
    order.

    It waits for every item to settle, then raises the failure of the lowest-numbered
    failed item as StepFailed (original type, message and traceback); with
    ``return_exceptions=True`` the exceptions are returned in place instead.

    In an async workflow, await it: ``images = await cd.map(render, pages)``. The items
    are read, and the map's index taken, when it is called; they are stored and started
    when it is awaited.
    """
    check_batch_size(batch_size)
    if not isinstance(step, Step):
        raise TypeError(f"cd.map() needs a durable step, got {step!r}")
    ctx = enter_body("cd.map()", f"use the builtin map({step.name}.fn, ...) to run the items here")
    write_caught_failure(ctx)
    if not iterables:
        raise TypeError("cd.map() needs at least one iterable")
    index = ctx.take_index()
    owner = f"step {step.name}"
    limit = ctx.max_map_items
    # One past the limit is enough to refuse: an endless iterable is never exhausted.
    given = zip(*iterables, strict=False)
    taken = given if limit is None else itertools.islice(given, limit + 1)
    inputs = [
        serialization.encode_arguments(
            owner, step.fn, args, {}, ctx.max_payload_bytes, ctx.max_payload_depth
        )
        for args in taken
    ]
    if limit is not None and len(inputs) > limit:
        raise RunLimitExceeded(
            f"workflow run {ctx.run_id!r}: cd.map({step.name}) at step {index} has more "
            f"than durable_max_map_items={limit} items; nothing of it was stored (split it "
            "into several maps, or raise durable_max_map_items)"
        )
    digest = hashlib.sha256()
    for text in inputs:
        digest.update(text.encode("utf-8") + b"\n")
    step_input = f'{{"fanout":"map","items":{len(inputs)},"digest":"{digest.hexdigest()}"}}'
    # Handed over in a box that _map_at empties: only it holds the items, and drops them
    # once they are stored (bounded memory while the results come in).
    box = [inputs]
    del inputs
    if in_async_body():
        label = f"cd.map({step.name}) (index {index})"
        return awaited_wait(
            label, lambda: _map_at(ctx, index, step, step_input, box, return_exceptions, batch_size)
        )
    return _map_at(ctx, index, step, step_input, box, return_exceptions, batch_size)


def _map_at(
    ctx: WorkflowContext,
    index: int,
    step: Step[Any, Any],
    step_input: str,
    box: list[list[str]],
    return_exceptions: bool,
    batch_size: int | str,
) -> list[Any]:
    """The map at step ``index``: its items (``box``'s one list) stored and started
    (unless recorded), then waited for."""
    ctx.check_stopping()
    inputs = box.pop()
    recorded = ctx.history.get(index)
    if recorded is not None:
        check_map_replay(ctx, index, recorded, step.name, step_input)
    elif not inputs:
        record(ctx, StepRecord(index, step.name, "ok", step_input, "[]", None))
        return []
    else:
        size = batch_size if isinstance(batch_size, int) else auto_batch_size(ctx, len(inputs))
        insert_and_publish(
            ctx,
            StepRecord(index, step.name, "started", step_input, None, None),
            step.name,
            step.options.queue,
            inputs,
            size,
        )
    count = len(inputs)
    del inputs  # bounded memory: only the results are kept
    resolved = wait_for(ctx, [index])[index]
    future: StepFuture[Any] = StepFuture(index, step.name)
    return collect(ctx, [(future, resolved, count)], return_exceptions)


# The largest batch_size: a batch's inputs are held in its worker while it runs.
MAX_BATCH_SIZE = 10_000
# batch_size="auto": about this many batches per pool process of the fleet (a slow batch
# or process then holds back a quarter of one's share), each of at most AUTO_MAX items
# (what a crash can make run again, and the leases one heartbeat renews).
AUTO_BATCHES_PER_PROCESS = 4
AUTO_MAX = 500


def check_batch_size(batch_size: object) -> None:
    """InvalidArgument naming ``batch_size`` unless it is "auto" or an int from 1 to
    MAX_BATCH_SIZE (checked before anything is written)."""
    if batch_size == "auto" and isinstance(batch_size, str):
        return
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise InvalidArgument(
            f'cd.map(): batch_size must be an integer >= 1 or "auto", got {batch_size!r}'
        )
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise InvalidArgument(
            f"cd.map(): batch_size must be from 1 to {MAX_BATCH_SIZE}, got {batch_size!r}"
        )


def auto_batch_size(ctx: WorkflowContext, count: int) -> int:
    """Items per task for ``count`` items: AUTO_BATCHES_PER_PROCESS batches per pool
    process of the fleet, at most AUTO_MAX items each (1 while items are few)."""
    dispatch = ctx.dispatch
    assert dispatch is not None
    if count <= AUTO_BATCHES_PER_PROCESS:
        return 1  # one item per task whatever the fleet: don't ask it
    processes = max(dispatch.concurrency(), 1)
    return auto_size(count, processes)


def auto_size(count: int, processes: int) -> int:
    """The batch size for ``count`` items on ``processes`` pool processes."""
    batches = processes * AUTO_BATCHES_PER_PROCESS
    return max(1, min(AUTO_MAX, -(-count // batches)))  # -(-a // b): a / b rounded up


def check_map_replay(
    ctx: WorkflowContext, index: int, recorded: StepRecord, name: str, step_input: str
) -> None:
    """check_replay, saying so when only the number of items changed."""
    if recorded.name == name and recorded.input != step_input:
        before = serialization.loads(recorded.input) if recorded.input.startswith("{") else {}
        now = serialization.loads(step_input)
        if isinstance(before, dict) and before.get("items") != now["items"]:
            raise NonDeterminismError(
                f"workflow {ctx.workflow_name} run {ctx.run_id!r}: step {index} "
                f"(cd.map of {name}) had {before.get('items')} items in the recorded "
                f"history, {now['items']} now"
            )
    check_replay(ctx, index, recorded, name, step_input)


def start_child(
    workflow_name: str,
    encoded_args: str,
    new_run: Callable[[str], NewRun],
    publish: Callable[[str], None],
    run_id: str | None,
    detached: bool,
) -> ChildHandle[Any]:
    """``workflow.start_child(...)``: insert the child run with the parent's step record
    and item in one transaction, then publish it. The engine passes ``new_run`` (the
    child's row, given its id) and ``publish`` (its Celery message, given its id)."""
    ctx = enter_body(
        f"{workflow_name}.start_child()", f"start a top-level run with {workflow_name}.delay()"
    )
    write_caught_failure(ctx)
    index = ctx.take_index()
    child_id = run_id or derived_id(f"{ctx.run_id}:{index}")
    name = CHILD_STEP_PREFIX + workflow_name
    step_input = f'{{"fanout":"child","id":{serialization.dumps(child_id)},"input":{encoded_args}}}'
    recorded = ctx.history.get(index)
    if recorded is not None:
        check_replay(ctx, index, recorded, name, step_input)
        return ChildHandle(index, child_id, workflow_name)
    check_child_depth(ctx, workflow_name, index)
    dispatch = ctx.dispatch
    assert dispatch is not None
    run = new_run(child_id)
    fan = FanOut(name, None, [encoded_args], dispatch.dispatch_grace, run, detached)
    step = StepRecord(index, name, "started", step_input, None, None)
    written = write_fanout(ctx, step, fan)
    if written:
        log_started(workflow_name, child_id, run.start_delay, parent=ctx.run_id)
    if written and run.start_delay is None:
        # A lost publish is the sweeper's, like any run's (durable_dispatch_grace).
        publish(child_id)
        faults.reach(faults.AFTER_DISPATCH, **ctx.log_fields(index), batch=0)
    return ChildHandle(index, child_id, workflow_name)


def check_child_depth(ctx: WorkflowContext, workflow_name: str, index: int) -> None:
    """RunLimitExceeded when a child of this run would nest deeper than
    ``durable_max_child_depth``. A top-level run's child is depth 1: only a child that
    starts a child asks the store (one query) how deep it is."""
    limit = ctx.max_child_depth
    if limit is None or ctx.parent_id is None:
        return
    depth = 1 + FENCED_WRITES.of(ctx.store).count_ancestors(ctx.run_id, limit)
    if depth > limit:
        raise RunLimitExceeded(
            f"workflow run {ctx.run_id!r}: child {workflow_name} at step {index} would "
            f"be nested {depth} deep, over durable_max_child_depth={limit}; nothing of it "
            "was stored"
        )
