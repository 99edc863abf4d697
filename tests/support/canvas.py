"""What the canvas app's tasks noted (tests/apps/canvas.py) and what a run still owes
Celery: read by the canvas tests."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa


def seen(rds: Any, tag: str) -> list[dict[str, Any]]:
    """The calls of the canvas app's plain tasks noted under ``tag``, oldest first."""
    return [json.loads(entry) for entry in rds.lrange(f"seen:{tag}", 0, -1)]


def owed(canvas: Any, run_id: str) -> bool:
    """Whether the run's report to Celery is still owed (its outbox entry)."""
    runs = canvas.durable.runtime.store.tables.runs
    with canvas.durable.runtime.store.engine.connect() as conn:
        query = sa.select(runs.c.outbox_at).where(runs.c.id == run_id)
        return conn.execute(query).scalar_one() is not None
