"""Lifecycle log lines: their structured fields, and JSON lines when ``durable_log_json``.

Every lifecycle line (start, claim, step recorded, suspend, wake, retry, settle, recover,
cancel, resume, fork, gc, and an item's claim, retry and record) passes the same fields as
``extra``: ``run_id``, ``workflow``, ``attempt`` and ``step_index`` (None where the
line's author can't know them), and ``workflow_id``, the older name of ``run_id``, kept
for one release so that log queries can move. Per-step and per-item lines are DEBUG, the
rest INFO or above.

With ``durable_log_json`` set, the ``celery_durable`` logger writes its own lines, one
JSON object each, to stderr (and no longer passes them to the root logger's handlers)::

    {"time": "2026-11-30T05:00:00.123+00:00", "level": "INFO", "logger":
     "celery_durable.workflow", "message": "workflow shop.checkout run r1 succeeded",
     "run_id": "r1", "workflow_id": "r1", "workflow": "shop.checkout", "attempt": 1,
     "step_index": 2}

Example::

    logger.info("workflow %s run %s woken", name, run_id, extra=run_fields(run_id, name))
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

LOGGER = "celery_durable"
FIELDS = ("run_id", "workflow_id", "workflow", "attempt", "step_index")
# Attributes every LogRecord has: anything else on a record came in through ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


def run_fields(
    run_id: str | None,
    workflow: str | None = None,
    attempt: int | None = None,
    step_index: int | None = None,
) -> dict[str, Any]:
    """The ``extra`` of a lifecycle line outside a running body (which has
    ``WorkflowContext.log_fields``)."""
    return {
        "run_id": run_id,
        "workflow_id": run_id,  # its older name, for one release
        "workflow": workflow,
        "attempt": attempt,
        "step_index": step_index,
    }


def log_started(workflow: str, run_id: str, delay: float | None, parent: str | None = None) -> None:
    """The lifecycle line of a new run (``.delay()``, or ``start_child`` in ``parent``)."""
    logging.getLogger(f"{LOGGER}.workflow").info(
        "workflow %s run %s started%s%s",
        workflow,
        run_id,
        "" if parent is None else f" as a child of run {parent}",
        "" if delay is None else f"; the sweeper publishes it in {delay:.1f}s",
        extra=run_fields(run_id, workflow, 0),
    )


def log_malformed(
    logger: logging.Logger,
    kind: str,
    message_id: Any,
    problem: str,
    outcome: str = "acknowledged and dropped",
    extra: dict[str, Any] | None = None,
) -> None:
    """The one line a message off the broker gets when no worker could serve it (wrong
    arguments, an unknown namespace, ids the store can't hold): a named refusal, logged
    once, instead of an exception (a traceback, a FAILURE) for each delivery."""
    logger.error(
        "malformed %s message %r: %s; %s",
        kind,
        message_id,
        problem,
        outcome,
        extra=extra if extra is not None else run_fields(None),
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the ``extra`` fields
    (the lifecycle fields always present) and the exception, if any."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            line[name] = getattr(record, name, None)
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in line:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=repr, ensure_ascii=False)


class _JsonHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``install_json`` installs (a class of its own: installed once)."""


def install_json() -> None:
    """Make the ``celery_durable`` logger write JSON lines (once per process)."""
    logger = logging.getLogger(LOGGER)
    if any(isinstance(handler, _JsonHandler) for handler in logger.handlers):
        return
    # The process's real stderr: a Celery worker replaces sys.stderr with a proxy that
    # logs what is written to it, which would wrap each JSON line in a text line.
    handler = _JsonHandler(sys.__stderr__)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.propagate = False  # each line once, as JSON


def describe_wait(signal: str | None, deadline: float | None, kind: str = "signal") -> str:
    """``waiting for signal 'approval' until 2026-...``: what a suspended run waits for
    (``kind``: "update" for a run in ``wait_for_update``)."""
    what = f"{kind} {signal!r}" if signal is not None else "its timer"
    until = "" if deadline is None else f" until {iso_time(deadline)}"
    return f"waiting for {what}{until}"


def iso_time(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).isoformat(timespec="seconds")
