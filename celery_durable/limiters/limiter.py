"""Fleet-wide limiters: a step (or a whole workflow) takes a slot, and a token if the limiter
has a rate, before it runs; without one the run waits, holding no lease and no worker slot.

The limits are declared in code (``durable.limiter``) and passed to every statement that
takes or hands off a slot, so a deploy that changes them takes effect as its workers start
and the database keeps no stale limit.

Example::

    payments = durable.limiter("payments", concurrency=5, rate="20/s")

    @durable.step(limiter=payments)
    def charge(order_id: int, amount: int) -> str: ...
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from celery_durable.body.context import (
    WorkflowContext,
    learn_first_step_limit,
    learn_next_shares_slot,
)
from celery_durable.body.replay import stop_writing, store_guard
from celery_durable.core import faults, validate
from celery_durable.errors import DuplicateRegistration, InvalidArgument, Suspended
from celery_durable.store import Limit, Outcome

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([smh])\s*$")
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}
DEFAULT_GRACE = 60.0  # a body without a dispatcher: the sweeper's default dispatch grace
BURST = 0.25  # seconds' worth of tokens a limiter's bucket holds


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
    limiters: dict[str, Limiter],
    name: str,
    concurrency: int | None,
    rate: str | None,
    key: Callable[..., Any] | None,
    key_named: str | None = None,
) -> Limiter:
    """Register a limiter in ``limiters`` (the Runtime's); declared twice, the same."""
    made = Limiter(name, concurrency=concurrency, rate=rate, key=key, key_named=key_named)
    known = limiters.get(name)
    if known is not None and (known.limit, known.key) != (made.limit, made.key):
        raise DuplicateRegistration(f"limiter {name!r} is already declared, otherwise")
    return limiters.setdefault(name, made)


def named(
    limiters: dict[str, Limiter], limiter: Limiter | str | None, owner: str
) -> Limiter | None:
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
    limiters: dict[str, Limiter],
    workflow: str,
    limiter: Limiter | str | None,
    concurrency: int | None,
    concurrency_key: Callable[..., Any] | None,
) -> Limiter | None:
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
        outcome, waited = ctx.store.take_slot(
            limiter.limit,
            key,
            ctx.workflow_id,
            index,
            priority=ctx.priority,
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
    limit = limiter.limit
    if ctx.last_limited == (limit.name, key, index - 1):
        learn_next_shares_slot(ctx.workflow_name, index - 1, True)
    elif index == 0 and limiter.key is None and limit.rate is None:
        learn_first_step_limit(ctx.workflow_name, limit)
    ctx.last_limited = (limit.name, key, index)
    kept, ctx.kept_slot = ctx.kept_slot, None
    waited, ctx.kept_slot_waited = ctx.kept_slot_waited, False
    if kept == (limit, key, index):
        return waited  # a record keeps it only while nobody waits; a claim says
    if kept is not None:
        release_slot(ctx, *kept)
    return wait_for_slot(ctx, limiter, index, key)


def give_back_kept_slot(ctx: WorkflowContext) -> None:
    """A step not behind the limiter and key the slot was kept for runs: hand it back
    first, rather than hold it through that step."""
    kept, ctx.kept_slot = ctx.kept_slot, None
    if kept is not None:
        release_slot(ctx, *kept)


def release_slot(ctx: WorkflowContext, limit: Limit, key: str, index: int) -> None:
    """Give the step's slot to the next waiter, and publish the run woken by it: the step
    failed (its slot is not kept through a retry's backoff), or others waited. A recorded
    step's slot is free without this: its record ends the hold."""
    dispatcher = ctx.dispatcher
    grace = DEFAULT_GRACE if dispatcher is None else dispatcher.dispatch_grace
    with store_guard(ctx):
        woken = ctx.store.release_slot(limit, key, ctx.workflow_id, index, grace)
    for run in woken:
        if dispatcher is not None:  # else the sweeper publishes it after the grace
            dispatcher.publish_run(run)
