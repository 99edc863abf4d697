"""What a run handle asks of the wings: ``WorkflowHandle.signal`` and ``.query`` act
through the waits wing (signals, state), ``.read_stream`` through the streams wing and
``.update`` through the updates wing, which ``wiring.py`` registers here, so the handle
imports no wing.

Example::

    HANDLE_HOOKS.signal = send_signal          # in wiring.py
    needed(HANDLE_HOOKS.signal, "signal")(runtime, run_id, "go", None, None)
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView
    from celery_durable.store import Store

Hook = TypeVar("Hook")


@dataclasses.dataclass
class HandleHooks:
    """The wings' functions behind the handle's verbs; each None until registered."""

    # (runtime, run id, signal name, payload, idempotency key) -> stored (False: a repeat)
    signal: Callable[[RuntimeView, str, str, Any, str | None], bool] | None = None
    # (store, run id, key) -> the value set last
    query: Callable[[Store, str, str], Any] | None = None
    # (store, run id, key, seconds) -> the value, once set
    wait_for_state: Callable[[Store, str, str, float], Any] | None = None
    # (store, run id, key) -> (set yet, the value, the run's status), without waiting
    look_for_state: Callable[[Store, str, str], tuple[bool, Any, str]] | None = None
    # (store, run id, key, start, timeout, with offsets) -> the stream's values, as written
    read_stream: Callable[[Store, str, str, int, float | None, bool], Iterator[Any]] | None = None
    # the same, for asyncio
    aread_stream: (
        Callable[[Store, str, str, int, float | None, bool], AsyncIterator[Any]] | None
    ) = None
    # (runtime, run id, update name, payload, idempotency key) -> the request's id
    send_update: Callable[[RuntimeView, str, str, Any, str | None], int] | None = None
    # (store, run id, request id) -> (answered yet, the answer, the run's status)
    look_for_answer: Callable[[Store, str, int], tuple[bool, Any, str]] | None = None


def needed(hook: Hook | None, name: str) -> Hook:
    """``hook``, registered; a RuntimeError naming it when it was not."""
    if hook is None:
        raise RuntimeError(
            f"no {name!r} hook is registered for workflow handles: import "
            "celery_durable.durable (a Durable wires its wings in)"
        )
    return hook


# The one registry: every Durable of a process has the same wings.
HANDLE_HOOKS = HandleHooks()
