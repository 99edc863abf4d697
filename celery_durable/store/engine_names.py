"""The names the engine gives what it records, for whoever reads a run back (the handle,
the console): a run's status as Celery's state, the name prefixes of the engine's own
steps (a consumed signal, a compensation), and a compensation step read as one.

Example::

    CELERY_STATES["RUNNING"]                     # 'STARTED'
    [c for c in map(Compensation.of, steps) if c is not None]
"""

from __future__ import annotations

import dataclasses

from celery import states

from celery_durable.core import serialization
from celery_durable.store.records import StepRecord

# The backend's state of a run, by the run's status.
CELERY_STATES = {
    "PENDING": states.PENDING,
    "RUNNING": states.STARTED,
    "WAITING": "WAITING",
    "SUCCEEDED": states.SUCCESS,
    "FAILED": states.FAILURE,
    "CANCELLED": states.REVOKED,
}

# The step that consumed (or timed out waiting for) signal NAME is named SIGNAL_STEP_PREFIX
# + NAME; the one that compensated step NAME, COMPENSATE_STEP_PREFIX + NAME.
SIGNAL_STEP_PREFIX = "celery_durable.signal:"
COMPENSATE_STEP_PREFIX = "celery_durable.compensate:"
# The step that received (or timed out waiting for) update NAME is UPDATE_STEP_PREFIX +
# NAME, which is also what a run suspended for it waits for (``wait_signal``); the steps
# that answered it, UPDATE_REPLY_PREFIX or UPDATE_REJECT_PREFIX + NAME.
UPDATE_STEP_PREFIX = "celery_durable.update:"
UPDATE_REPLY_PREFIX = "celery_durable.update_reply:"
UPDATE_REJECT_PREFIX = "celery_durable.update_reject:"


def waited_for(wait_signal: str) -> str:
    """What a run WAITING for ``wait_signal`` waits for: ``signal 'approval'``, or
    ``update 'add_item'`` for a run suspended in ``wait_for_update``."""
    if wait_signal.startswith(UPDATE_STEP_PREFIX):
        return f"update {wait_signal.removeprefix(UPDATE_STEP_PREFIX)!r}"
    return f"signal {wait_signal!r}"


@dataclasses.dataclass(frozen=True)
class Compensation:
    """One compensation that ran: the step it undid (name, index), "ok" or "error"."""

    step: str
    index: int
    status: str
    error: str | None = None

    @classmethod
    def of(cls, record: StepRecord) -> Compensation | None:
        """The compensation a recorded step is, or None for any other step."""
        if not record.name.startswith(COMPENSATE_STEP_PREFIX):
            return None
        message = None
        if record.error:
            error = serialization.decode_error(record.error)
            message = f"{error.get('type', '')}: {error.get('message', '')}"
        return cls(
            record.name.removeprefix(COMPENSATE_STEP_PREFIX),
            int(serialization.loads(record.input)["of"]),
            record.status,
            message,
        )
