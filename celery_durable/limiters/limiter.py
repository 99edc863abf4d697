"""Fleet-wide limiters: a step (or a whole workflow) takes a slot, and a token if the limiter
has a rate, before it runs; without one the run waits, holding no lease and no worker slot.

The limits are declared in code (``durable.limiter``) and passed to every statement that
takes or hands off a slot, so a deploy that changes them takes effect as its workers start
and the database keeps no stale limit.

Example::

    payments = durable.limiter("payments", concurrency=5, rate="20/s")

    @durable.step(limiter=payments)
    def charge(order_id: int, amount: int) -> str: ...

A limited step's slot is held by ``LimiterGuard``, the step guard ``wiring.py`` registers:
the step's run path names no limiter. The run's slots live in its ``SlotState`` (a wing
state of the context), and what this process learned of each workflow's steps (which
share a slot, which limit the first one takes) in the tables below.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from celery_durable.body.context import LimiterView, RunningStep, StepGuard, WorkflowContext
from celery_durable.body.replay import stop_writing, store_guard
from celery_durable.core import faults, validate
from celery_durable.errors import DuplicateRegistration, InvalidArgument, Suspended
from celery_durable.limiters.buckets import Limit
from celery_durable.limiters.store_area import LIMITERS
from celery_durable.store import Outcome, StepRecord, StepWrite

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([smh])\s*$")
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}
DEFAULT_GRACE = 60.0  # a body without a dispatch: the sweeper's default dispatch grace
BURST = 0.25  # seconds' worth of tokens a limiter's bucket holds

# Per workflow name and step index: whether the step after it last ran behind the same
# limiter and key (then its record keeps the slot for it). Learned by each run in this
# process.
_NEXT_SHARES_SLOT: dict[tuple[str, int], bool] = {}
# Per workflow name: the limit (with no key function, nor rate) its first step ran behind
# last time in this process, whose slot a first delivery's claim takes for that step.
_FIRST_STEP_LIMIT: dict[str, Limit] = {}
# Entries in each learned table: bounded, since a loop's step indices have no end (a full
# table is forgotten and learned again).
_LEARNED_MAX = 10_000
WING = "limiter"  # the key of a run's SlotState among the context's wing states


@dataclasses.dataclass
class SlotState:
    """A run's limited-step slots, in its context (``slots(ctx)``)."""

    # The slot the run holds for its step at an index, kept by the record of the step
    # before it (or taken by the claim), and the slot of the step running now that its
    # record keeps for the next one: (limit, key, step index).
    kept_slot: tuple[Limit, str, int] | None = None
    kept_slot_waited: bool = False  # others waited for the key when the claim took it
    slot_to_keep: tuple[Limit, str, int] | None = None
    # The last limited step this delivery ran (limiter, key, index): what learns whether
    # the step after it shares its slot.
    last_limited: tuple[str, str, int] | None = None
    # Orders the run's waits for a slot (apply_async(priority=)), highest first.
    priority: int = 0


def slots(ctx: WorkflowContext) -> SlotState:
    return ctx.wing_state(WING, SlotState)


def _learn(table: dict[Any, Any], key: Any, value: Any) -> None:
    if len(table) >= _LEARNED_MAX:
        table.clear()
    table[key] = value


def learn_next_shares_slot(workflow: str, index: int, shares: bool) -> None:
    _learn(_NEXT_SHARES_SLOT, (workflow, index), shares)


def learn_first_step_limit(workflow: str, limit: Limit) -> None:
    _learn(_FIRST_STEP_LIMIT, workflow, limit)


def first_step_limit(workflow: str) -> Limit | None:
    """The limit the workflow's first step ran behind last time (no key, no rate)."""
    return _FIRST_STEP_LIMIT.get(workflow)


def next_shares_slot(workflow: str, index: int) -> bool:
    """The step after step ``index`` ran behind the same limiter and key last time."""
    return _NEXT_SHARES_SLOT.get((workflow, index), False)


def parse_rate(rate: str, owner: str) -> float:
    """Tokens a second of ``"N/s"``, ``"N/m"`` or ``"N/h"``; InvalidArgument otherwise."""
    found = _RATE.match(rate) if isinstance(rate, str) else None
    if found is None or float(found.group(1)) <= 0:
        raise InvalidArgument(
            f'{owner}: rate must be "N/s", "N/m" or "N/h" with N > 0, got {rate!r}'
        )
    return float(found.group(1)) / _PER[found.group(2)]


class Limiter:
    """A named fleet-wide limit: ``concurrency`` slots (per key, with ``key``) and, with
    ``rate``, a token bucket per key shared by every worker."""

    def __init__(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate: str | None = None,
        key: Callable[..., Any] | None = None,
        key_named: str | None = None,
    ) -> None:
        owner = f"limiter {name!r}"
        validate.check_text(name, "limiter(name)", max_chars=255, allow_empty=False)
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise InvalidArgument(
                f"{owner}: concurrency must be an integer >= 1, got {concurrency!r}"
            )
        if concurrency is None and rate is None:
            raise InvalidArgument(f"{owner}: give concurrency, rate, or both")
        if key is not None and not callable(key):
            raise InvalidArgument(f"{owner}: key must be a function of the arguments, got {key!r}")
        per_second = None if rate is None else parse_rate(rate, owner)
        # A quarter second's worth of tokens at most: an idle limiter allows a small burst,
        # not a second's worth at once; slots freed and each sweep hand the tokens out.
        capacity = 1.0 if per_second is None else max(1.0, math.ceil(per_second * BURST))
        self.name = name
        self.key = key
        # How errors name the key function: as the user wrote it (concurrency_key of a
        # workflow), else as the key of this limiter.
        self.key_named = key_named or f"the key function of limiter {name!r}"
        self.rate = rate
        self.limit = Limit(name, concurrency, per_second, capacity)

    def __repr__(self) -> str:
        return f"<durable limiter {self.name!r} {self.limit}>"

    def key_of(self, owner: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The key the call's arguments fall under ("" without a key function)."""
        if self.key is None:
            return ""
        try:
            value = self.key(*args, **kwargs)
        except Exception as exc:
            raise InvalidArgument(f"{owner}: {self.key_named} raised {exc!r}") from exc
        if not isinstance(value, str):
            raise InvalidArgument(
                f"{owner}: {self.key_named} returned {type(value).__name__} {value!r}, not a string"
            )
        validate.check_text(value, f"{owner}: the key of limiter {self.name!r}", max_chars=255)
        return value


def declare(
    limiters: dict[str, LimiterView],
    name: str,
    concurrency: int | None,
    rate: str | None,
    key: Callable[..., Any] | None,
    key_named: str | None = None,
) -> Limiter:
    """Register a limiter in ``limiters`` (the Runtime's); declared twice, the same."""
    made = Limiter(name, concurrency=concurrency, rate=rate, key=key, key_named=key_named)
    known = limiters.setdefault(name, made)
    if not isinstance(known, Limiter) or (known.limit, known.key) != (made.limit, made.key):
        raise DuplicateRegistration(f"limiter {name!r} is already declared, otherwise")
    return known


def named(
    limiters: dict[str, LimiterView], limiter: LimiterView | str | None, owner: str
) -> LimiterView | None:
    """A limiter given by name is looked up: InvalidArgument naming an unknown one."""
    if not isinstance(limiter, str):
        return limiter
    if limiter not in limiters:
        raise InvalidArgument(
            f"{owner}: no limiter named {limiter!r}; declare it first with "
            f"durable.limiter({limiter!r}, ...) (declared: {sorted(limiters)})"
        )
    return limiters[limiter]


def workflow_limiter(
    limiters: dict[str, LimiterView],
    workflow: str,
    limiter: LimiterView | str | None,
    concurrency: int | None,
    concurrency_key: Callable[..., Any] | None,
) -> LimiterView | None:
    """A workflow's limiter: the one named, or for ``concurrency=`` (``concurrency_key=``)
    a limiter of its own, "workflow:NAME"."""
    if concurrency is None and concurrency_key is None:
        return named(limiters, limiter, f"workflow {workflow}")
    if limiter is not None:
        raise InvalidArgument(f"workflow {workflow}: give limiter or concurrency, not both")
    name = f"workflow:{workflow}"
    return declare(limiters, name, concurrency or 1, None, concurrency_key, "concurrency_key")


def wait_for_slot(ctx: WorkflowContext, limiter: Limiter, index: int, key: str) -> bool:
    """Before a limited step runs (never on replay): take a slot, or suspend the run,
    WAITING "for limiter NAME", until a hand-off gives it one. Returns whether other runs
    wait for the key (then the step's end hands its slot on)."""
    with store_guard(ctx):
        outcome, waited = LIMITERS.of(ctx.store).take_slot(
            limiter.limit,
            key,
            ctx.run_id,
            index,
            priority=slots(ctx).priority,
            fence=ctx.fence,
            carried=ctx.take_deferred(),
        )
    if outcome is Outcome.RECORDED:
        return waited
    if outcome is not Outcome.SUSPENDED:
        stop_writing(ctx)
    faults.reach(faults.AFTER_SUSPEND, **ctx.log_fields(index))
    raise ctx.stop(Suspended(f"waiting for limiter {limiter.name!r}"))


def hold_slot(ctx: WorkflowContext, limiter: Limiter, index: int, key: str) -> bool:
    """Before a limited step runs: use the slot the record of the step before kept for
    it, or take one (``wait_for_slot``). Returns whether other runs wait for the key."""
    limit, state = limiter.limit, slots(ctx)
    if state.last_limited == (limit.name, key, index - 1):
        learn_next_shares_slot(ctx.workflow_name, index - 1, True)
    elif index == 0 and limiter.key is None and limit.rate is None:
        learn_first_step_limit(ctx.workflow_name, limit)
    state.last_limited = (limit.name, key, index)
    kept, state.kept_slot = state.kept_slot, None
    waited, state.kept_slot_waited = state.kept_slot_waited, False
    if kept == (limit, key, index):
        return waited  # a record keeps it only while nobody waits; a claim says
    if kept is not None:
        release_slot(ctx, *kept)
    return wait_for_slot(ctx, limiter, index, key)


def give_back_kept_slot(ctx: WorkflowContext) -> None:
    """A step not behind the limiter and key the slot was kept for runs: hand it back
    first, rather than hold it through that step."""
    state = ctx.wings.get(WING)
    if state is None or state.kept_slot is None:
        return
    kept, state.kept_slot = state.kept_slot, None
    release_slot(ctx, *kept)


def release_slot(ctx: WorkflowContext, limit: Limit, key: str, index: int) -> None:
    """Give the step's slot to the next waiter, and publish the run woken by it: the step
    failed (its slot is not kept through a retry's backoff), or others waited. A recorded
    step's slot is free without this: its record ends the hold."""
    dispatch = ctx.dispatch
    grace = DEFAULT_GRACE if dispatch is None else dispatch.dispatch_grace
    with store_guard(ctx):
        woken = LIMITERS.of(ctx.store).release_slot(limit, key, ctx.run_id, index, grace)
    for run in woken:
        if dispatch is not None:  # else the sweeper publishes it after the grace
            dispatch.publish_run(run)


def _record_keeping_slot(ctx: WorkflowContext, step: StepRecord) -> StepWrite | None:
    """The record of a step whose slot the next step shares: one statement writes it and
    keeps the slot for that step (None: not this step's record, the plain one is)."""
    state = slots(ctx)
    keeping = state.slot_to_keep
    if keeping is None or keeping[2] != step.idx or step.status != "ok":
        return None
    limit, key, _ = keeping
    written, kept = LIMITERS.of(ctx.store).record_step_keeping_slot(
        ctx.run_id, ctx.fence, step, limit, key, ctx.next_index
    )
    if kept:
        state.kept_slot = (limit, key, ctx.next_index)
    return written


class LimiterGuard(StepGuard):
    """The step guard of limiters (``wiring.py`` registers it): a limited step holds a
    slot of its limiter while it runs; any other step first gives back a slot kept for
    a step the body did not reach."""

    def index_taken(self, ctx: WorkflowContext, index: int) -> None:
        if index == 0:  # until the first step says it is behind a limiter (hold_slot)
            _FIRST_STEP_LIMIT.pop(ctx.workflow_name, None)
        state = ctx.wings.get(WING)
        last = None if state is None else state.last_limited
        if last is not None and last[2] == index - 1:
            # Until a step behind the same limiter and key says otherwise (hold_slot).
            learn_next_shares_slot(ctx.workflow_name, index - 1, False)

    def around(
        self,
        ctx: WorkflowContext,
        step: RunningStep,
        index: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> AbstractContextManager[None]:
        limiter = step.options.limiter
        if not isinstance(limiter, Limiter):  # checked at registration: None
            give_back_kept_slot(ctx)
            return nullcontext()
        return self._holding(
            ctx, step, limiter, index, limiter.key_of(f"step {step.name}", args, kwargs)
        )

    @contextmanager
    def _holding(
        self, ctx: WorkflowContext, step: RunningStep, limiter: Limiter, index: int, key: str
    ) -> Iterator[None]:
        waited = hold_slot(ctx, limiter, index, key)
        # Its record frees the slot; a deferred record comes later, so that one (and a
        # failure, and a slot others wait for) is given back here.
        dispatch = ctx.dispatch
        recorded_frees = (
            step.options.commit == "each"
            and not waited
            and dispatch is not None
            and not dispatch.in_process  # eager: a release runs the next waiter at once
        )
        limit, state = limiter.limit, slots(ctx)
        if recorded_frees and limit.rate is None and next_shares_slot(ctx.workflow_name, index):
            # The next step is behind the same limiter and key: the record keeps the slot
            # for it (a rate's steps each take a token, so theirs take their own).
            state.slot_to_keep = (limit, key, index)
            ctx.record_with = lambda record: _record_keeping_slot(ctx, record)
        try:
            yield
        except BaseException:
            release_slot(ctx, limit, key, index)
            raise
        finally:
            state.slot_to_keep, ctx.record_with = None, None
        if not recorded_frees:
            release_slot(ctx, limit, key, index)
