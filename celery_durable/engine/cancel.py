"""Cancelling a run outside its delivery (a handle's ``cancel``, a revoke, a deadline):
the store's one write, then the parents its cancelled children woke, then the settle
listeners (a run that reports tells Celery at once).

Example::

    cancelled = cancel(runtime, run_id, "no longer wanted")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery_durable.engine.publish import publish_woken

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView
    from celery_durable.store import Cancellation

# The reason a run revoked by ``celery control revoke`` (or Flower) is cancelled with.
REVOKED = "revoked (celery control revoke)"


def cancel(runtime: RuntimeView, run_id: str, reason: str | None) -> Cancellation:
    """Cancel a run, its pending items and its (not detached) children; publish the
    parents their cancelled children woke."""
    cancelled = runtime.store.cancel_run(run_id, reason, runtime.config.dispatch_grace)
    for woken in cancelled.woken:
        publish_woken(runtime, woken, "a child it waited for was cancelled")
    if cancelled.requested and cancelled.status == "CANCELLED":
        for listener in runtime.hooks.settle_listeners:
            listener.cancelled(runtime, run_id)
    return cancelled
