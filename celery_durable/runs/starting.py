"""What a start takes from the caller's options and transaction: the start time that a
``countdown`` or ``eta`` asks for (kept in the database, never an ETA message), and the
publish that waits for the caller's commit, and the claim fallback of such a start
(``claim_when_visible``, a delivery hook wiring.py registers).

Example::

    start_delay_of(30, None)                      # 30.0
    publish_after_commit(session, publish)        # publish() once the session commits
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from celery_durable.core import faults
from celery_durable.engine.delivery import TRANSACTIONAL_HEADER, request_header
from celery_durable.store.db.foreign import ForeignTransaction

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from celery_durable.engine.hooks import Delivery
    from celery_durable.store import Claim

# How long a worker waits for a transactional start's row to become visible: the message
# is published from the commit hook, a moment before the COMMIT reaches the server.
_TRANSACTIONAL_VISIBILITY_WAIT = 2.0


def start_delay_of(countdown: Any, eta: Any) -> float | None:
    """countdown/eta become a start time kept in the database, never an ETA message."""
    if countdown is not None and eta is not None:
        raise ValueError("pass countdown or eta, not both")
    if countdown is not None:
        if (
            isinstance(countdown, bool)
            or not isinstance(countdown, int | float)
            or not math.isfinite(countdown)
        ):
            raise TypeError(f"countdown must be a finite number of seconds, got {countdown!r}")
        return float(countdown) if countdown > 0 else None
    if eta is not None:
        if not isinstance(eta, dt.datetime):
            raise TypeError(f"eta must be a datetime, got {type(eta).__name__}")
        if eta.tzinfo is None:
            eta = eta.replace(tzinfo=dt.timezone.utc)
        delay = (eta - dt.datetime.now(dt.timezone.utc)).total_seconds()
        return delay if delay > 0 else None
    return None


def publish_after_commit(
    connection: Connection | Session | ForeignTransaction, publish: Callable[[], None]
) -> None:
    """Run ``publish`` once the caller's transaction on ``connection`` commits; never if it
    rolls back."""
    if isinstance(connection, ForeignTransaction):
        connection.on_commit(publish)
        return
    state = {"open": True}

    def on_commit(*_: Any) -> None:
        if state["open"]:
            state["open"] = False
            publish()

    def on_rollback(*_: Any) -> None:
        state["open"] = False

    if isinstance(connection, Session):
        event.listen(connection, "after_commit", on_commit, once=True)
        event.listen(connection, "after_rollback", on_rollback, once=True)
    else:
        # Connection has no after-commit hook; the worker waits briefly for the row.
        event.listen(connection, "commit", on_commit, once=True)
        event.listen(connection, "rollback", on_rollback, once=True)


def claim_when_visible(delivery: Delivery) -> Claim | None:
    """A transactional start's message can arrive a moment before its COMMIT: look again
    briefly. The row's visibility is read before each claim, so a COMMIT that lands
    between the two can't end the wait with the run unclaimed."""
    if not request_header(delivery.request, TRANSACTIONAL_HEADER):
        return None
    store, run_id = delivery.runtime.store, delivery.run_id
    deadline = time.monotonic() + _TRANSACTIONAL_VISIBILITY_WAIT
    while True:
        faults.reach(faults.AFTER_CLAIM_MISSED, run_id=run_id)
        visible = store.get_status(run_id) is not None
        claim = delivery.claim_run()
        if claim is not None or visible or time.monotonic() > deadline:
            return claim
        time.sleep(0.02)
