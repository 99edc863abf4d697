"""A limited workflow's slot (``@durable.workflow(limiter=...)``, ``concurrency=``): taken
in the transaction that inserts its run (or it waits, PENDING with no message), confirmed
when its delivery starts, free once it settles (handed on, when others waited); and the
hand-off of every limiter's free slots to its waiters, from the sweeper. The hooks
``wiring.py`` registers for limiters are here too: the start's insert that takes the slot
(``insert_variant``), the claim that reads a run's slot or takes its first step's
(``claim_variant``), the run's slot held around its body
(``run_slot``) and a kept slot given back when the body fails (``give_back_on_stop``).

Example::

    slot = take_run_slot(runtime, definition, ctx, claim, args, kwargs)   # before the body
    give_run_slot(runtime, definition, ctx.run_id, slot, finished=True)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery_durable.body.context import WorkflowContext
from celery_durable.core.logs import run_fields
from celery_durable.engine import taskevents
from celery_durable.engine.publish import publish_woken
from celery_durable.errors import LeaseLost, Suspended
from celery_durable.limiters.buckets import Limit
from celery_durable.limiters.limiter import (
    WING,
    SlotState,
    first_step_limit,
    give_back_kept_slot,
    slots,
)
from celery_durable.limiters.slot_claims import SlotClaim
from celery_durable.limiters.statements import WHOLE_RUN
from celery_durable.limiters.store_area import LIMITERS
from celery_durable.store import Outcome

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

    from celery_durable.engine.definition import WorkflowDefinition
    from celery_durable.engine.hooks import Delivery, Undo
    from celery_durable.engine.runtime_view import RuntimeView
    from celery_durable.engine.start_hooks import RunInsert
    from celery_durable.store.db.foreign import ForeignTransaction
    from celery_durable.store.records import Claim, NewRun

logger = logging.getLogger("celery_durable.workflow")
# A hand-off gives waiters the tokens of this many sweeper polls at most: a sweep a little
# late still keeps the rate; one that comes very late gives no burst of what it missed.
CATCH_UP_POLLS = 3


def run_slot_key(
    definition: WorkflowDefinition, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str | None:
    """The key a limited workflow's run takes its slot under (None: no limiter), found
    before anything is written: a key function that raises is the caller's error."""
    limiter = definition.limiter
    if limiter is None:
        return None
    return limiter.key_of(f"workflow {definition.name}", args, kwargs)


def insert_variant(
    runtime: RuntimeView,
    definition: WorkflowDefinition,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> RunInsert | None:
    """A start hook: a limited workflow's run takes its slot in the statement that inserts
    it (``insert_run``), under the key found here, before anything is written."""
    if definition.limiter is None:
        return None
    key = run_slot_key(definition, args, kwargs)
    return lambda run, bind: insert_run(runtime, definition, run, key, bind)


def insert_run(
    runtime: RuntimeView,
    definition: WorkflowDefinition,
    run: NewRun,
    key: str | None,
    bind: Connection | Session | ForeignTransaction | None,
) -> tuple[bool, bool]:
    """Insert the run (in the caller's transaction, with ``bind``); a limited one takes its
    slot in the same transaction, unless it starts later (it takes it when claimed).
    Returns (inserted, to publish now): a run without a slot waits, PENDING with no
    message, until a hand-off publishes it."""
    limiter = definition.limiter
    if limiter is None or key is None or run.start_delay is not None:
        return runtime.store.insert_run(run, bind), True
    inserted, slotted = LIMITERS.of(runtime.store).insert_limited_run(run, limiter.limit, key, bind)
    if inserted and not slotted:
        logger.info(
            "workflow %s run %s waits for limiter %r (key %r): no free slot",
            definition.name,
            run.id,
            limiter.name,
            key,
            extra=run_fields(run.id, definition.name),
        )
    return inserted, slotted


@dataclasses.dataclass(frozen=True)
class RunSlot:
    """The slot a limited run's delivery holds: its key, and whether others waited."""

    key: str
    waited: bool


def take_run_slot(
    runtime: RuntimeView,
    definition: WorkflowDefinition,
    ctx: WorkflowContext,
    claim: Claim,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> RunSlot | None:
    """Before a limited run's body: its slot, or the delivery ends with the run PENDING
    and no message, its lease and attempt given back."""
    limiter = definition.limiter
    if limiter is None:
        return None
    key = limiter.key_of(f"workflow {definition.name}", args, kwargs)
    area = LIMITERS.of(runtime.store)
    # A first delivery, straight from PENDING, was live since it took its slot (if it
    # did): a read tells, the claim's own (claim_limited_run) where it made one. A run
    # that waited, retried or was recovered confirms by a write.
    first = claim.attempts == 1 and not claim.has_steps and not claim.recoveries
    if first and isinstance(claim, SlotClaim) and claim.slot_read:
        if claim.held_slot is not None:
            return RunSlot(key, claim.slot_waited)  # taken at its start, or handed to it
    else:
        held = area.confirm_slot(limiter.limit, key, ctx.run_id, read=first)
        if held is not None:
            return RunSlot(key, held.waited)
    outcome, waited = area.take_slot(
        limiter.limit,
        key,
        ctx.run_id,
        priority=slots(ctx).priority,
        fence=ctx.fence,
        park="PENDING",
    )
    if outcome is Outcome.RECORDED:
        return RunSlot(key, waited)
    text = f"waiting for limiter {limiter.name!r} (key {key!r}) {taskevents.ctx_line(ctx)}"
    if outcome is Outcome.SUSPENDED:
        logger.info("workflow %s run %s is %s", definition.name, ctx.run_id, text)
        raise taskevents.ended(runtime.app, ctx.run_id, taskevents.SCHEDULED, text)
    raise taskevents.ended(runtime.app, ctx.run_id, None, f"not run: {outcome.value}")


def give_run_slot(
    runtime: RuntimeView,
    definition: WorkflowDefinition,
    run_id: str,
    slot: RunSlot | None,
    finished: bool,
) -> None:
    """The delivery ended. A run that ``finished`` frees its slot by settling, with no
    write; one that saw waiters hands it on, and one that will run again (a retry, a lost
    lease) gives it back, so that its backoff holds no slot."""
    limiter = definition.limiter
    if limiter is None or slot is None:
        return
    if finished and not slot.waited and not runtime.app.conf.task_always_eager:
        return
    grace = runtime.config.dispatch_grace
    try:
        woken = LIMITERS.of(runtime.store).release_slot(
            limiter.limit, slot.key, run_id, WHOLE_RUN, grace
        )
    except Exception:  # noqa: BLE001 - the slot is free anyway once the run isn't live
        logger.warning(
            "run %s: could not give its slot of %r back", run_id, limiter.name, exc_info=True
        )
        return
    for run in woken:
        publish_woken(runtime, run, f"limiter {limiter.name!r} handed it a slot")


def hand_off_slots(runtime: RuntimeView) -> int:
    """The sweeper's pass: every limiter's free slots and refilled tokens go to its next
    waiters (a dead holder's slot is free once its lease is out); returns the runs woken."""
    grace = runtime.config.dispatch_grace
    catch_up = CATCH_UP_POLLS * runtime.config.poll_interval
    woken = 0
    area = LIMITERS.of(runtime.store)
    for limiter in list(runtime.limiters.values()):
        for run in area.hand_off(limiter.limit, grace, catch_up=catch_up):
            publish_woken(runtime, run, f"limiter {limiter.name!r} handed it a slot")
            woken += 1
    return woken


def claim_variant(delivery: Delivery) -> Callable[[], Claim | None] | None:
    """A limited run's claim reads its slot too: no read of its own before the body. A
    first step behind a limiter: the claim takes its slot, no take before it."""
    limiter = delivery.definition.limiter
    if limiter is not None:
        limit: Limit = limiter.limit
        return lambda: claim_reading_slot(delivery, limit)
    first = first_step_limit(delivery.definition.name)
    if first is None:
        return None

    def claim_taking_slot() -> Claim | None:
        config, run_id, owner = delivery.runtime.config, delivery.run_id, delivery.owner
        lease, recoveries = config.lock_timeout, config.max_recoveries
        claim = LIMITERS.of(delivery.runtime.store).claim_run_taking_slot(
            run_id, owner, lease, recoveries, first, "", 0
        )
        if claim is not None and claim.step_slot_taken:
            state = slots_of(delivery)
            state.kept_slot, state.kept_slot_waited = (first, "", 0), claim.step_slot_waited
        return claim

    return claim_taking_slot


def claim_reading_slot(delivery: Delivery, limit: Limit) -> Claim | None:
    """A limited run's claim, which reads the slot the run holds in its statement (the
    plain claim's lease and recoveries)."""
    config = delivery.runtime.config
    return LIMITERS.of(delivery.runtime.store).claim_limited_run(
        delivery.run_id, delivery.owner, config.lock_timeout, config.max_recoveries, limit
    )


def slots_of(delivery: Delivery) -> SlotState:
    """The run's SlotState, made in the delivery's wing states before its context is."""
    state: SlotState = delivery.wings.setdefault(WING, SlotState())
    return state


def note_priority(delivery: Delivery) -> None:
    """Before the body: a run started with a priority waits for slots in its order."""
    claim = delivery.claim
    if claim is not None and claim.priority:
        slots_of(delivery).priority = claim.priority


def run_slot(delivery: Delivery) -> Undo | None:
    """Before a limited run's body: its slot (``take_run_slot``), given back as it ends."""
    runtime, definition, claim = delivery.runtime, delivery.definition, delivery.claim
    assert claim is not None  # noqa: S101 - before-body hooks run on a claimed run
    slot = take_run_slot(runtime, definition, delivery.ctx, claim, delivery.args, delivery.kwargs)
    if slot is None:
        return None
    return lambda finished: give_run_slot(runtime, definition, delivery.run_id, slot, finished)


def give_back_on_stop(delivery: Delivery, stop: BaseException) -> None:
    """A slot kept for a step the body never reached, as it failed (or continued as
    new): a retry's backoff would hold it (a waiting run frees it without a write, and a
    lost lease is the new owner's). A store that fails here leaves it to the lease."""
    ctx = delivery.ctx
    if WING not in ctx.wings or slots(ctx).kept_slot is None:
        return
    if isinstance(stop, (Suspended, LeaseLost)):
        return
    try:
        give_back_kept_slot(ctx)
    except BaseException:  # noqa: BLE001 - the body's own outcome is what settles
        logger.warning("run %s: its kept slot is left to its lease", ctx.run_id)
