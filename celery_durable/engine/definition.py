"""A registered workflow: its function and the options given to ``@durable.workflow``.

Plain data, below every other module of the engine: the Runtime keeps one per workflow
name, the delivery runs one, a limited run takes its slot by one's limiter, and none of
them needs the Runtime to know what a definition is.

Example::

    definition = WorkflowDefinition(place_order, "shop.place_order", None, 3, 1.0, None)
    runtime.workflows[definition.name] = definition
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from celery_durable.body.context import LimiterView


@dataclasses.dataclass(frozen=True)
class WorkflowDefinition:
    """A registered workflow: its function and the options given to ``@durable.workflow``."""

    fn: Callable[..., Any]
    name: str
    queue: str | None
    max_attempts: int | None
    retry_backoff: float | None
    signature: inspect.Signature | None
    # The whole run takes a slot of it before its body runs (@durable.workflow(limiter=)).
    limiter: LimiterView | None = None
    # Seconds from its start to its deadline (@durable.workflow(timeout=)); None: none.
    timeout: float | None = None
    # The validators of its updates, by update name (``@checkout.validator("add_item")``):
    # each is called with a request's payload and refuses it by raising. Filled after
    # registration, so left out of comparisons.
    validators: dict[str, Callable[[Any], Any]] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )
    # An ``async def`` body: the delivery runs its coroutine on the thread's loop.
    is_async: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))
