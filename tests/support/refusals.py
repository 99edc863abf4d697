"""Raw messages put straight onto the broker: check that a real worker refused each one
by name, once, acknowledged it and raised nothing."""

from __future__ import annotations

import re

from .services import BROKER_URL, queue_length
from .waiting import wait_until
from .workers import CeleryProcess

# Celery's own line for a delivery that ended: a return ("succeeded"), an Ignore
# ("ignored", acknowledged), or what the bugs gave ("raised unexpected", a traceback).
_ENDED = r"\] (succeeded|ignored|raised unexpected|retry)"


def assert_refused_once(worker: CeleryProcess, since: int, refused: dict[str, str]) -> str:
    """Wait until every message of ``refused`` (task id -> its queue) ended in the
    worker's log after offset ``since``; then each must have ended acknowledged (a
    return or an Ignore, never an exception), with exactly one named refusal line
    ("malformed <kind> message '<task id>'") and no traceback. Returns that part of the
    log."""

    def ended() -> str | None:
        tail = worker.log()[since:]
        done = all(re.search(re.escape(f"[{task_id}") + _ENDED, tail) for task_id in refused)
        return tail if done else None

    tail = wait_until(ended, 60, 0.1, lambda: f"each message to end:\n{worker.log()[since:]}")
    for task_id in refused:
        outcome = re.search(re.escape(f"[{task_id}") + _ENDED, tail)
        assert outcome and outcome.group(1) in ("succeeded", "ignored"), (task_id, tail)
        lines = [line for line in tail.splitlines() if f"message {task_id!r}" in line]
        assert len(lines) == 1 and "malformed" in lines[0], (task_id, tail)
    assert "Traceback" not in tail, tail
    for queue in set(refused.values()):
        assert queue_length(BROKER_URL, queue) == 0  # nothing requeued or left behind
    return tail
