"""Queries: values a workflow publishes with ``set_state``, read without running it.

Example::

    @durable.workflow
    def booking(booking_id: str) -> dict:
        cd.set_state({"stage": "reserved"})
        ...

    handle.query()               # {"stage": "reserved"}
    handle.query("progress")     # UnknownQuery until the workflow sets that key
"""

from __future__ import annotations

from typing import Any

from . import serialization, validate
from .errors import UnknownQuery, WorkflowNotFound
from .step import stop_writing, store_guard, write_caught_failure
from .store import Store
from .suspend import require_context

DEFAULT_KEY = "state"


def set_state(value: Any, key: str = DEFAULT_KEY) -> None:
    """Record ``value`` under ``key`` for ``handle.query(key)``; the latest value wins."""
    ctx = require_context("set_state")
    ctx.check_stopping()
    validate.check_text(key, "set_state(key)", max_chars=255, allow_empty=False)
    # NotSerialisable is permanent: retrying the workflow would fail the same way.
    encoded = serialization.encode_json(
        f"set_state({key!r}) in workflow run {ctx.workflow_id!r}: the value", value
    )
    write_caught_failure(ctx)
    with store_guard(ctx):
        stored = ctx.store.set_state(ctx.workflow_id, ctx.fence, key, encoded, ctx.take_deferred())
    if not stored:
        stop_writing(ctx)


def query(store: Store, workflow_id: str, key: str = DEFAULT_KEY) -> Any:
    """The latest value set under ``key``; for "state" before any set_state, the output
    of the last finished step (None if there is none)."""
    value = store.get_state(workflow_id, key)
    if value is not None:
        return serialization.loads(value)
    if store.get_status(workflow_id) is None:
        raise WorkflowNotFound(workflow_id)
    if key == DEFAULT_KEY:
        output = store.last_step_output(workflow_id)
        return None if output is None else serialization.loads(output)
    raise UnknownQuery(f"workflow run {workflow_id!r} has no query value {key!r}")
