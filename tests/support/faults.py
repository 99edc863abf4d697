"""Fault points armed per run for the test app's workers (``fault:<workflow id>`` in Redis):
the pool process that reaches the point SIGKILLs itself or raises, and marks it fired."""

from __future__ import annotations

from celery_durable.core import faults


def arm(rds, workflow_id: str, point: str, action: str, step: int | None = None) -> None:  # type: ignore[no-untyped-def]
    assert point in faults.POINTS
    rds.set(f"fault:{workflow_id}", f"{point}:{action}" + ("" if step is None else f":{step}"))


def fired(rds, workflow_id: str, point: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(rds.get(f"fired:{workflow_id}:{point}"))
