"""Named fault-injection points in the engine's commit path, for crash-window tests.

Production never installs a hook, so reaching a point costs one ``is None`` check. A test
installs a hook (in the worker process, e.g. from the test app) that kills the process or
raises at a chosen point, then checks that the run still ends correctly and that no
finished step runs again.

Example::

    from celery_durable.core import faults

    def crash(point: str, info: dict) -> None:
        if point == faults.AFTER_RECORD_STEP and info["step_index"] == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    faults.install(crash)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

AFTER_CLAIM = "after_claim"
AFTER_RECORD_STEP = "after_record_step"
# A deferred step's record is buffered in the worker (after any write its bound caused),
# not written yet: a crash here runs it again.
AFTER_DEFER_STEP = "after_defer_step"
# A step failure ended the attempt; its error is not written yet (it is written together
# with the retry, in one transaction).
BEFORE_SCHEDULE_RETRY = "before_schedule_retry"
AFTER_SUSPEND = "after_suspend"
AFTER_CONSUME_SIGNAL = "after_consume_signal"
AFTER_SETTLE = "after_settle"
# The settle that finished a run with a canvas is committed; its report to Celery (result
# backend, callbacks, chain, chord) is not made yet: the sweeper makes it from the outbox.
BEFORE_REPORT = "before_report"
# A chord member's final state is in the result backend; its part of the chord is not
# recorded yet. A stored state proves the rest of its report was made, not this part.
BEFORE_CHORD_PART = "before_chord_part"
# A transactional start's claim found no row yet; before the worker looks again.
AFTER_CLAIM_MISSED = "after_claim_missed"
# A fan-out step and its items (or child) are recorded and a batch of them published;
# nothing of theirs is recorded in the body yet. ``batch`` numbers the batch (0, 1, ...).
AFTER_DISPATCH = "after_dispatch"
# An item task recorded its item's outcome (and woke the parent); before its ack.
AFTER_RECORD_ITEM = "after_record_item"

POINTS = frozenset(
    {
        AFTER_CLAIM,
        AFTER_RECORD_STEP,
        AFTER_DEFER_STEP,
        BEFORE_SCHEDULE_RETRY,
        AFTER_SUSPEND,
        AFTER_CONSUME_SIGNAL,
        AFTER_SETTLE,
        BEFORE_REPORT,
        BEFORE_CHORD_PART,
        AFTER_CLAIM_MISSED,
        AFTER_DISPATCH,
        AFTER_RECORD_ITEM,
    }
)

Hook = Callable[[str, dict[str, Any]], None]

_hook: Hook | None = None


def install(hook: Hook | None) -> None:
    """Call ``hook(point, info)`` at every fault point of this process; None removes it."""
    global _hook
    _hook = hook


def reach(point: str, **info: Any) -> None:
    """The engine passes a fault point; ``info`` names the run and step."""
    if _hook is not None:
        _hook(point, info)
