"""The operator API is one class: a Durable is one, a Runtime makes one on its own (what
the dashboard serves without a Durable), and Durable no longer shows its machinery."""

from __future__ import annotations

from typing import Any

import pytest

import celery_durable as cd
from celery_durable import Durable
from celery_durable.ops.operations import Operations
from celery_durable.testing import eager_workflows, sweep

MACHINERY = ("store", "leases", "sweeper", "dispatch", "dispatcher", "publish", "sweep_once")


def test_durable_keeps_its_machinery_behind_runtime(durable: Durable) -> None:
    assert isinstance(durable, Operations)
    assert [name for name in MACHINERY if hasattr(durable, name)] == []
    parts = (durable.runtime.store, durable.runtime.leases, durable.runtime.sweeper)
    assert all(part is not None for part in parts)


def test_operations_of_a_runtime_serve_without_a_durable(durable: Durable) -> None:
    @durable.workflow
    def held() -> Any:
        return cd.wait_for_signal("go")

    with eager_workflows(durable) as kit:
        run = held.apply_async((), run_id="ops-1")
        operations = Operations(durable.runtime)
        assert [r.id for r in operations.list_runs("waiting").runs] == ["ops-1"]
        details = operations.describe_run("ops-1")
        assert details is not None and details.run.status == "WAITING"
        assert operations.get_handle("ops-1").id == run.id
        assert sweep(durable) == kit.sweep() == 0


def test_the_dashboard_takes_operations(durable: Durable) -> None:
    pytest.importorskip("flask")
    from celery_durable.ops.dashboard import dashboard_app

    client = dashboard_app(Operations(durable.runtime)).test_client()
    assert client.get("/").status_code == 200
    assert client.get("/workflows").status_code == 200
