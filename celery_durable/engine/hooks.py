"""Delivery hooks: where a feature plugs into a delivery (``engine.delivery.execute``)
without the kernel naming it, in the spirit of Dramatiq's middleware.

A ``Delivery`` is one delivery's state, handed to every hook; ``DeliveryHooks`` holds the
hooks of a Durable (its Runtime's ``hooks``), registered by ``wiring.py`` from each
feature's own module. In the order a delivery meets them:

- ``claim_variants``: how to claim; the first that returns a claim function is used
  (a limiter's slot read or taken in the claim's own statement), else the plain claim;
- ``claim_fallbacks``: tried in order while there is no claim (a start by name);
- ``claimed``: the run is claimed, no context yet (a refused start settles here);
- ``before_body``: the context is built; each may adjust the arguments, take something
  (return how to give it back: called with whether the run finished) or end the
  delivery instead of the body (a saga's rollback);
- ``body_stopped``: the body raised (``stop``), before the attempt settles;
- ``settle_listeners`` (``runtime_view.SettleListener``): the run waits, stops with a
  feature's own stop (a continue as new), ends for good (a saga rolls back first) or has
  its final status (a run that reports tells Celery);
- ``step_guards``: what wraps each step (``body.context.StepGuard``).

Example::

    hooks = runtime.hooks                       # in wiring.py, from each feature's module
    hooks.claim_variants.append(limits.claim_variant)
    hooks.step_guards.append(LimiterGuard())
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery_durable.body.context import StepGuard, WorkflowContext
    from celery_durable.engine.definition import WorkflowDefinition
    from celery_durable.engine.runtime_view import RuntimeView, SettleListener
    from celery_durable.store import Claim

logger = logging.getLogger("celery_durable.workflow")


@dataclasses.dataclass
class Delivery:
    """One delivery of a workflow's task, as its hooks see it."""

    runtime: RuntimeView
    definition: WorkflowDefinition
    request: Any
    run_id: str
    owner: str
    # The message's own way to store its run when none exists (a start by name), or None.
    start_if_missing: Callable[[], Exception | None] | None = None
    claim: Claim | None = None
    # Set once the run is claimed (``claimed`` hooks run before it is).
    ctx: WorkflowContext = dataclasses.field(init=False, repr=False)
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Each feature's state for this delivery, by key; the run's context shares it.
    wings: dict[str, Any] = dataclasses.field(default_factory=dict)

    def claim_run(self) -> Claim | None:
        """The plain claim. A claim variant claims with its wing's own statement, under
        the same lease and recoveries (``runtime.config``)."""
        config = self.runtime.config
        return self.runtime.store.claim_run(
            self.run_id, self.owner, config.lock_timeout, config.max_recoveries
        )


# What a before-body hook returns: how to give back what it took (None: nothing),
# called with whether the run finished.
Undo = Callable[[bool], None]


@dataclasses.dataclass
class DeliveryHooks:
    """A Durable's delivery hooks and step guards, each list in the order it runs."""

    claim_variants: list[Callable[[Delivery], Callable[[], Claim | None] | None]] = (
        dataclasses.field(default_factory=list)
    )
    claim_fallbacks: list[Callable[[Delivery], Claim | None]] = dataclasses.field(
        default_factory=list
    )
    claimed: list[Callable[[Delivery], None]] = dataclasses.field(default_factory=list)
    before_body: list[Callable[[Delivery], Undo | None]] = dataclasses.field(default_factory=list)
    body_stopped: list[Callable[[Delivery, BaseException], None]] = dataclasses.field(
        default_factory=list
    )
    settle_listeners: list[SettleListener] = dataclasses.field(default_factory=list)
    step_guards: list[StepGuard] = dataclasses.field(default_factory=list)

    def claim(self, delivery: Delivery) -> Callable[[], Claim | None]:
        """The claim function of the first variant that has one, else the plain claim."""
        for variant in self.claim_variants:
            claim = variant(delivery)
            if claim is not None:
                return claim
        return delivery.claim_run

    def fall_back(self, delivery: Delivery, claim: Claim | None) -> Claim | None:
        """Each fallback in turn, until one claims the run."""
        for fallback in self.claim_fallbacks:
            if claim is not None:
                break
            claim = fallback(delivery)
        return claim

    def enter_body(self, delivery: Delivery) -> list[Undo]:
        """Run the before-body hooks; what they took is given back (not finished) if
        one of them raises."""
        undos: list[Undo] = []
        try:
            for hook in self.before_body:
                undo = hook(delivery)
                if undo is not None:
                    undos.append(undo)
        except BaseException:
            leave_body(undos, finished=False)  # never raises: the hook's error is the one
            raise
        return undos


def leave_body(undos: list[Undo], *, finished: bool) -> None:
    """Give back what the before-body hooks took, last taken first. One that fails is
    logged and the others are still given back: what it held is left to its lease."""
    for undo in reversed(undos):
        try:
            undo(finished)
        except Exception:  # noqa: BLE001 - the delivery's own outcome is what settles
            logger.warning("a before-body hook could not give back what it took", exc_info=True)
