"""Builders of store-level rows for tests: a new run, a claimed run, a fan-out and its
started record, and the count of a run's rows per table."""

from __future__ import annotations

import sqlalchemy as sa

from celery_durable.store import FanOut, NewRun, StepRecord, Store


def new_run(
    run_id: str,
    *,
    name: str = "wf",
    args: str = "[[],{}]",
    queue: str | None = None,
    max_attempts: int = 3,
    retry_backoff: float = 0.0,
    grace: float = 60.0,
    canvas: str | None = None,
) -> NewRun:
    """A run as ``start`` inserts it; ``grace``: seconds before the sweeper may publish it;
    ``canvas``: what it tells Celery when it settles (engine.canvas JSON)."""
    return NewRun(
        id=run_id,
        name=name,
        args=args,
        queue=queue,
        max_attempts=max_attempts,
        retry_backoff=retry_backoff,
        dispatch_grace=grace,
        canvas=canvas,
    )


def claimed(store: Store, run_id: str, grace: float = 60.0) -> int:
    """A new run, inserted and claimed (its first attempt); returns its fence."""
    assert store.insert_run(new_run(run_id, grace=grace))
    claim = store.claim_run(run_id, "me", lease=30)
    assert claim is not None and claim.attempts == 1
    return claim.fence


def started(idx: int, count: int) -> StepRecord:
    """The started record of a map step of ``count`` items."""
    return StepRecord(idx, "s", "started", f'{{"fanout":"map","items":{count}}}', None, None)


def fan(count: int, grace: float = 60.0, batch_size: int = 1) -> FanOut:
    """The fan-out of ``count`` items of step ``s`` on queue ``q``, ``batch_size`` to a task."""
    inputs = [f"[[{n}],{{}}]" for n in range(count)]
    return FanOut("s", "q", inputs, grace, batch_size=batch_size)


def rows_of(store: Store, run_id: str) -> dict[str, int]:
    """How many rows of each table belong to ``run_id``."""
    counts = {}
    with store.engine.connect() as conn:
        for name in ("runs", "steps", "signals", "state"):
            table = getattr(store.tables, name)
            column = table.c.id if name == "runs" else table.c.run_id
            counts[name] = conn.execute(
                sa.select(sa.func.count()).select_from(table).where(column == run_id)
            ).scalar_one()
    return counts


def item_rows(basic_app, run_id: str) -> list:  # type: ignore[no-untyped-def]
    """The item rows of ``run_id`` in the test app's store."""
    return basic_app.durable.runtime.store.fanout.list_items(run_id)


def recorded_items(basic_app, run_id: str) -> set[int]:  # type: ignore[no-untyped-def]
    """The items of ``run_id`` whose outcome is recorded ok."""
    return {row.item for row in item_rows(basic_app, run_id) if row.status == "ok"}
