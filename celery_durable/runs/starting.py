"""What a start takes from the caller's options and transaction: the start time that a
``countdown`` or ``eta`` asks for (kept in the database, never an ETA message), and the
publish that waits for the caller's commit.

Example::

    start_delay_of(30, None)                      # 30.0
    publish_after_commit(session, publish)        # publish() once the session commits
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from celery_durable.store.db.foreign import ForeignTransaction

if TYPE_CHECKING:
    from sqlalchemy import Connection


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
