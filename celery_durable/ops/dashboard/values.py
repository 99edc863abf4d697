"""How the dashboard shows stored values: decoded, redacted, pretty, cut at a limit.

Every input, output, result and state value goes through ``shown``, which applies the
``durable_redact`` hook and cuts the text at ``limit`` characters (the page links to the
whole value). The templates escape the text; nothing here builds HTML.

Example::

    value = shown('{"password": "x", "n": 1}', mask, limit=2000)
    value.text        # '{"password": "***", "n": 1}'
    value.truncated   # False
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from typing import Any

from celery_durable.core.redact import Redactor
from celery_durable.ops import console
from celery_durable.store import RunSummary
from celery_durable.store.reads import CurrentStep

# Characters of one value shown on the run page before "show all".
VALUE_LIMIT = 2000
# Characters of an error message shown in the runs table.
ERROR_LIMIT = 140
# A value longer than this is folded (collapsed) on the run page.
FOLD_LINES = 12
# A value that fits in this many characters stays on one line.
ONE_LINE = 72

STATUS_ICONS = {
    "PENDING": "○",
    "RUNNING": "▶",
    "WAITING": "‖",
    "SUCCEEDED": "✓",
    "FAILED": "✕",
    "CANCELLED": "⊘",
    "ok": "✓",
    "error": "✕",
    "retry": "↻",
    "waiting": "‖",
    "running": "▶",
    "pending": "○",
    "cancelled": "⊘",
    "revoked": "⊘",
}


@dataclasses.dataclass(frozen=True)
class Shown:
    """A value as the page shows it: ``text`` (at most ``limit`` characters),
    ``truncated`` when cut, ``size`` of the whole text, ``lines`` for folding."""

    text: str
    truncated: bool
    size: int

    @property
    def folded(self) -> bool:
        return self.truncated or self.text.count("\n") >= FOLD_LINES


def shown(raw: str | None, redact: Redactor, limit: int | None = VALUE_LIMIT) -> Shown:
    """``raw`` (stored JSON) redacted and pretty-printed, cut at ``limit`` (None: whole)."""
    value = redact(console.decoded(raw))
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
        if len(text) > ONE_LINE:
            text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(value)
    size = len(text)
    if limit is not None and size > limit:
        return Shown(text[:limit], True, size)
    return Shown(text, False, size)


def cut(text: str | None, limit: int = ERROR_LIMIT) -> str:
    """One line of at most ``limit`` characters."""
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_of(raw: str | None, redact: Redactor) -> dict[str, str] | None:
    """A stored error as type, message and traceback (the message redacted if it is
    JSON-like; tracebacks are shown as stored)."""
    parts = console.error_parts(raw)
    if parts is None:
        return None
    message = parts.get("message", "")
    if not isinstance(message, str):
        message = json.dumps(redact(message), default=str)
    return {
        "type": str(parts.get("type", "unknown")),
        "message": message,
        "traceback": str(parts.get("traceback") or ""),
        "summary": console.error_summary(raw, width=ERROR_LIMIT),
    }


def run_row(run: RunSummary, now: float, step: CurrentStep | None = None) -> dict[str, Any]:
    """One row of the runs table; ``step``: the run's last recorded step."""
    took: float | None
    if run.status in ("RUNNING", "WAITING", "PENDING") and run.started_at is not None:
        took = max(0.0, now - run.started_at)
    else:
        took = console.took(run)
    return {
        "id": run.id,
        "workflow": run.name,
        "status": run.status,
        "created": console.iso(run.created_at, False),
        "started": console.iso(run.started_at, False) if run.started_at is not None else None,
        "took": console.span(took) if took is not None else "-",
        "attempt": console.attempts_of(run),
        "detail": cut(console.detail(run)),
        "forked_from": run.forked_from,
        "step": None
        if step is None
        else {
            "idx": step.idx,
            "name": step.name.rsplit(".", 1)[-1],
            "full": step.name,
            "status": step.status,
        },
    }


def percentile(values: list[float], fraction: float) -> float | None:
    """The ``fraction`` quantile of sorted ``values`` (None when empty)."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[round(fraction * 100) - 1]
