"""The dashboard with the fill in the tables: the runs page and a 1,000-step run page.

Each page is requested through the dashboard's WSGI app in-process (Flask's test client):
the time covers the reads, the template and the response, not a network hop or a
browser's rendering. The 1,000-step run is inserted for the measurement (its steps carry
inputs and outputs of a realistic size) and deleted afterwards.

Example::

    result = measure_dashboard(bench.durable, reps=30)
    result["runs_page"]["p99_ms"], result["run_page"]["bytes"]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import delete, insert, select

from benchmarks.measure import summary_ms
from celery_durable import Durable

STEPS = 1000
# The target for each page, p99.
TARGET_MS = 300.0


def insert_long_run(durable: Durable, run_id: str, steps: int = STEPS) -> None:
    """A SUCCEEDED run of ``steps`` steps, each with a ~150-byte input and output."""
    store = durable.runtime.store
    tables = store.sql.admin.tables
    ns = durable.config.namespace
    with store.engine.begin() as conn:
        now = float(conn.execute(select(store.sql.admin.now)).scalar_one())
        conn.execute(
            insert(tables.runs).values(
                namespace=ns,
                id=run_id,
                name="benchmarks.long_run",
                status="SUCCEEDED",
                args=json.dumps([["order-42"], {}]),
                attempts=1,
                max_attempts=3,
                retry_backoff=5.0,
                result=json.dumps({"steps": steps}),
                created_at=now - 60,
                started_at=now - 59,
                finished_at=now - 1,
                updated_at=now - 1,
            )
        )
        conn.execute(
            insert(tables.steps),
            [
                {
                    "namespace": ns,
                    "run_id": run_id,
                    "idx": idx,
                    "name": f"benchmarks.step_{idx % 7}",
                    "status": "ok",
                    "input": json.dumps([["order-42", idx, {"sku": f"sku-{idx}", "qty": 2}], {}]),
                    "output": json.dumps({"idx": idx, "ok": True, "note": "x" * 80}),
                    "error": None,
                    "created_at": now - 59 + idx * 0.05,
                    "duration": 0.01 + (idx % 10) * 0.003,
                    "started_at": now - 59 + idx * 0.05 - (0.01 + (idx % 10) * 0.003),
                    "attempt": 1,
                }
                for idx in range(steps)
            ],
        )


def delete_long_run(durable: Durable, run_id: str) -> None:
    store = durable.runtime.store
    tables = store.sql.admin.tables
    ns = durable.config.namespace
    with store.engine.begin() as conn:
        conn.execute(
            delete(tables.steps).where(
                tables.steps.c.namespace == ns, tables.steps.c.run_id == run_id
            )
        )
        conn.execute(
            delete(tables.runs).where(tables.runs.c.namespace == ns, tables.runs.c.id == run_id)
        )


def _timed_get(client: Any, path: str, reps: int) -> dict[str, Any]:
    def get() -> Any:
        response = client.get(path)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code}")
        return response

    for _ in range(2):  # warm-up: connections, compiled statements and templates
        size = len(get().data)
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        get()
        samples.append(time.perf_counter() - started)
    return {**summary_ms(samples), "bytes": size}


def measure_dashboard(durable: Durable, reps: int) -> dict[str, Any]:
    """Time the runs page (unfiltered, and failed runs only), the 1,000-step run page and
    the workflows page, ``reps`` times each."""
    client = durable.dashboard_app().test_client()
    run_id = f"bench-dashboard-{time.time_ns()}"
    insert_long_run(durable, run_id)
    try:
        cases: dict[str, Callable[[], Any]] = {
            "runs_page": lambda: _timed_get(client, "/", reps),
            "runs_page_failed": lambda: _timed_get(client, "/?status=failed", reps),
            "run_page": lambda: _timed_get(client, f"/run/{run_id}", reps),
            "workflows_page": lambda: _timed_get(client, "/workflows", max(3, reps // 3)),
        }
        return {name: case() for name, case in cases.items()}
    finally:
        delete_long_run(durable, run_id)


def describe(result: dict[str, Any]) -> str:
    runs, run = result["runs_page"], result["run_page"]
    return (
        f"dashboard runs page p50 {runs['p50_ms']:.1f} ms (p99 {runs['p99_ms']:.1f}), "
        f"{STEPS}-step run page p50 {run['p50_ms']:.1f} ms (p99 {run['p99_ms']:.1f}, "
        f"{run['bytes'] / 1e6:.1f} MB)"
    )
