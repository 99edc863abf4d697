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

import time
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeoutError

from celery_durable.body.context import enter_body
from celery_durable.body.replay import stop_writing, store_guard, write_caught_failure
from celery_durable.core import serialization, validate
from celery_durable.errors import UnknownQuery, WorkflowCancelled, WorkflowFailed, WorkflowNotFound
from celery_durable.store import Store
from celery_durable.waits.store_area import WAITS

DEFAULT_KEY = "state"


def set_state(value: Any, key: str = DEFAULT_KEY) -> None:
    """Record ``value`` under ``key`` for ``handle.query(key)``; the latest value wins."""
    ctx = enter_body("celery_durable.set_state()")
    validate.check_text(key, "set_state(key)", max_chars=255, allow_empty=False)
    # NotSerialisable is permanent: retrying the workflow would fail the same way.
    encoded = serialization.encode_json(
        f"set_state({key!r}) in workflow run {ctx.run_id!r}: the value",
        value,
        ctx.max_payload_bytes,
        ctx.max_payload_depth,
    )
    write_caught_failure(ctx)
    with store_guard(ctx):
        stored = WAITS.of(ctx.store).set_state(
            ctx.run_id, ctx.fence, key, encoded, ctx.take_deferred()
        )
    if not stored:
        stop_writing(ctx)


def query(store: Store, run_id: str, key: str = DEFAULT_KEY) -> Any:
    """The latest value set under ``key``; for "state" before any set_state, the output
    of the last finished step (None if there is none)."""
    value = WAITS.of(store).get_state(run_id, key)
    if value is not None:
        return serialization.loads(value)
    if store.get_status(run_id) is None:
        raise WorkflowNotFound(run_id)
    if key == DEFAULT_KEY:
        output = store.last_step_output(run_id)
        return None if output is None else serialization.loads(output)
    raise UnknownQuery(f"workflow run {run_id!r} has no query value {key!r}")


def wait_for_state(store: Store, run_id: str, key: str, wait: float) -> Any:
    """``query(key)`` once the run has set ``key``: woken by LISTEN/NOTIFY on Postgres
    (set_state notifies), polling on SQLite. ``celery.exceptions.TimeoutError`` after
    ``wait`` seconds; WorkflowFailed or WorkflowCancelled if the run ended without it."""
    validate.check_text(key, "query(key)", max_chars=255, allow_empty=False)
    deadline = time.monotonic() + wait
    with store.listener() as listener:
        while True:
            found, value, status = look_for_state(store, run_id, key)
            if found:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CeleryTimeoutError(
                    f"workflow run {run_id!r} did not set {key!r} within {wait}s "
                    f"(status {status}); it goes on running"
                )
            listener.wait_for(run_id, min(0.5, remaining))


def look_for_state(store: Store, run_id: str, key: str) -> tuple[bool, Any, str]:
    """One look for ``query(key)``, without waiting: (True, the value, status) once set,
    (False, None, status) while the run may still set it; WorkflowNotFound,
    WorkflowFailed, WorkflowCancelled or UnknownQuery once it can't."""
    run = store.get_run(run_id)  # before the value: a set, then an end
    value = WAITS.of(store).get_state(run_id, key)
    if value is not None:
        return True, serialization.loads(value), run.status if run else "unknown"
    if run is None:
        raise WorkflowNotFound(run_id)
    if run.status == "CANCELLED":
        raise WorkflowCancelled(run_id, run.cancel_reason)
    if run.status == "SUCCEEDED":
        raise UnknownQuery(f"workflow run {run_id!r} succeeded without setting {key!r}")
    if run.status == "FAILED":
        error = serialization.decode_error(run.error) if run.error else {}
        raise WorkflowFailed(
            run_id,
            error.get("type", "unknown"),
            error.get("message", ""),
            error.get("traceback", ""),
        )
    return False, None, run.status
