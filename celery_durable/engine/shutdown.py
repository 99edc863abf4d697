"""Whether an exception that ends a workflow body or an item means its process is being
stopped (give the lease back, no attempt used) rather than a failure of the run.

A cold shutdown (``kill -QUIT``, a second Ctrl+C) and ``revoke(terminate=True)`` reach a
prefork pool child the same way: the main process sends it SIGTERM (``Request.cancel`` and
``Request.terminate`` call ``pool.terminate_job``), and billiard's handler in the child
(``billiard.common._shutdown_cleanup``) raises ``SystemExit(-(256 - signum))``, ``-241``
for SIGTERM. The worker's shutdown flags (``celery.worker.state.should_stop`` and
``should_terminate``) are set only in the process that got the signal, the main one, so a
child never sees them; it learns from billiard that its own handler ran. The flags still
serve the pools that run tasks in the main process (solo, threads).

billiard also sends SIGTERM when a task's hard time limit runs out: a delivery past its
hard limit is a failed attempt, as before, or a run that always overruns would be handed
back and run again forever.

Example::

    deadline = shutdown.hard_deadline(task.request, task.time_limit, time.monotonic())
    ...
    why = shutdown.interruption(exc, deadline)   # None: settle exc as a failure
"""

from __future__ import annotations

import time
from typing import Any

# billiard's clock starts when the child accepts the job, a little before the delivery
# starts ours: its SIGTERM for the limit can come just before our deadline.
_TIME_LIMIT_SLACK = 1.0

SIGNALLED = "a terminate signal (a cold shutdown, or a revoke with terminate=True)"
SHUTTING_DOWN = "the worker's shutdown"


def hard_deadline(request: Any, time_limit: float | None, started: float) -> float | None:
    """When the hard time limit of the delivery ``request`` runs out (monotonic), if it has
    one: the message's own, else the task's ``time_limit``; ``started``: when it started."""
    limits = getattr(request, "timelimit", None) or (None, None)
    hard = limits[0] or time_limit
    return started + float(hard) - _TIME_LIMIT_SLACK if hard else None


def interruption(exc: BaseException, deadline: float | None = None) -> str | None:
    """Why ``exc`` ends the delivery because its process is being stopped, or None when it
    is the run's own failure (or a hard time limit ran out, ``deadline`` passed)."""
    if _terminate_handler_fired():
        if deadline is not None and time.monotonic() >= deadline:
            return None
        # Whatever arrives here is the unwinding of that SystemExit, also an exception a
        # finally block raised on the way (as billiard itself sees it).
        return SIGNALLED
    # Not a recorded outcome raised again (``final``: a child's WorkflowCancelled).
    if isinstance(exc, Exception) or getattr(exc, "final", False):
        return None
    from celery.worker import state

    return SHUTTING_DOWN if state.should_stop or state.should_terminate else None


def _terminate_handler_fired() -> bool:
    from billiard import common

    fired = getattr(common, "terminate_handler_fired", None)  # billiard >= 4.3.2
    if fired is not None:
        return bool(fired())
    return bool(getattr(common, "_should_have_exited", [False])[0])  # what it reads
