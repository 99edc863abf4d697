"""Start hooks: where a feature plugs into a run's start (``runs/task.py``: ``.delay()``,
a schedule's firing, a child, a message sent by name) without the kernel naming it.

``StartHooks`` holds them (the Runtime's ``start_hooks``), set by ``durable.py`` from each
feature's own module. In the order a start meets them:

- ``insert_variants``: how to insert the run; the first that returns an insert is used
  (a limited workflow's run takes its slot in the insert's own statement), else the
  plain insert. A variant is asked before anything is written, so what it raises (a
  limiter's key function) is the caller's error;
- ``encode_canvas``: the canvas options of a start (Celery's link, chain, chord...),
  taken out of its options and encoded for the run's row, which fires them when the run
  settles;
- ``take_canvas``: a delivery's message has its canvas taken out before Celery's tracer
  sees it; what it carried stays with the delivery, for a start by name;
- ``start_by_name``: a message whose run doesn't exist stores it;
- ``start_child``: ``workflow.start_child()`` in a workflow body.

Example::

    starts = runtime.start_hooks                  # in durable.py, from each feature's module
    starts.insert_variants.append(limits.insert_variant)
    starts.start_child = compose.start_child
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Celery
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

    from celery_durable.body.step import Started
    from celery_durable.engine.definition import WorkflowDefinition
    from celery_durable.engine.runtime_view import RuntimeView
    from celery_durable.store import NewRun
    from celery_durable.store.db.foreign import ForeignTransaction

    # Where the run is inserted: the caller's transaction, or None for one of its own.
    Bind = Connection | Session | ForeignTransaction | None

# Inserts the run on the bind; returns (inserted, to publish now): a run that waits for
# something (a limiter's slot) is published later, by whatever frees it.
RunInsert = Callable[["NewRun", "Bind"], tuple[bool, bool]]
InsertVariant = Callable[
    ["RuntimeView", "WorkflowDefinition", tuple[Any, ...], dict[str, Any]], RunInsert | None
]
# (workflow name, its encoded arguments, the child's row given its id, its publish given
# its id, the id asked for, detached): the child's handle.
ChildStarter = Callable[
    [str, str, Callable[[str], "NewRun"], Callable[[str], None], str | None, bool],
    "Started[Any]",
]


def no_canvas(app: Celery, options: dict[str, Any], owner: str) -> str | None:
    """Without a canvas feature, a run's row has no canvas."""
    return None


def no_child(*_: Any) -> Started[Any]:
    raise RuntimeError("workflow.start_child(): no Durable has installed child runs")


@dataclasses.dataclass
class StartHooks:
    """A Durable's start hooks (see the module's docstring for each)."""

    insert_variants: list[InsertVariant] = dataclasses.field(default_factory=list)
    encode_canvas: Callable[[Celery, dict[str, Any], str], str | None] = no_canvas
    # (app, request): what the message carried, opaque here (the canvas feature's own).
    take_canvas: Callable[[Celery, Any], Any] = lambda app, request: None
    # (the workflow's task, request, args, kwargs, what take_canvas returned): stores
    # the run; returns the error to settle it with (arguments it can't take), or None.
    start_by_name: (
        Callable[[Any, Any, tuple[Any, ...], dict[str, Any], Any], Exception | None] | None
    ) = None
    start_child: ChildStarter = no_child

    def insert(
        self,
        runtime: RuntimeView,
        definition: WorkflowDefinition,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> RunInsert:
        """The insert of the first variant that has one, else the plain insert."""
        for variant in self.insert_variants:
            insert = variant(runtime, definition, args, kwargs)
            if insert is not None:
                return insert
        return lambda run, bind: (runtime.store.insert_run(run, bind), True)
