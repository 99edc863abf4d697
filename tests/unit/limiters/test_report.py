"""What operators see of limiters (limiters/report.py), on the embedded default: the
``durable limiters`` command (table and JSON), ``durable show`` naming the limiter a run
waits for, the dashboard's panel, and the Prometheus gauges."""

from __future__ import annotations

import json
from typing import Any

import pytest

from celery_durable import Durable
from tests.support.cli import invoke as cli


def a_waiter(durable: Durable) -> Any:
    """A run holding the only slot of "one", and a second run waiting for it."""
    one = durable.limiter("one", concurrency=1)
    seen: dict[str, Any] = {}

    @durable.step(limiter=one)
    def guarded(who: str) -> str:
        if who == "first":
            seen["waiter"] = pipeline.delay("second")
            seen["table"] = cli(durable, "limiters")
            seen["json"] = [
                json.loads(line) for line in cli(durable, "limiters", "--json").splitlines()
            ]
            seen["show"] = cli(durable, "show", seen["waiter"].id)
        return who

    @durable.workflow
    def pipeline(who: str) -> str:
        return guarded(who)

    pipeline.delay("first")
    return seen


def test_the_limiters_command_and_show_name_the_slots_and_the_wait(durable):
    seen = a_waiter(durable)
    assert seen["json"] == [
        {
            "limiter": "one",
            "key": "",
            "concurrency": 1,
            "rate_per_second": None,
            "in_use": 1,
            "waiting": 1,
            "oldest_wait_seconds": seen["json"][0]["oldest_wait_seconds"],
            "tokens": None,
        }
    ]
    assert seen["json"][0]["oldest_wait_seconds"] >= 0
    header, row = seen["table"].splitlines()[:2]
    assert header.split() == ["LIMITER", "KEY", "IN", "USE", "WAITING", "OLDEST", "WAIT", "TOKENS"]
    assert row.split()[:4] == ["one", "-", "1/1", "1"]
    assert "waiting for a slot of limiter 'one'" in seen["show"]
    assert cli(durable, "limiters", "--json").strip() != ""  # the key row stays, now idle
    assert seen["waiter"].get(timeout=5) == "second"


def test_the_dashboard_and_the_metrics_show_the_limiters(durable):
    pytest.importorskip("flask")
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest

    from celery_durable.ops.metrics import DurableCollector

    a_waiter(durable)
    page = durable.dashboard_app().test_client().get("/workflows").get_data(as_text=True)
    assert 'id="limiters"' in page and "<td>one</td>" in page
    registry = CollectorRegistry()
    registry.register(DurableCollector([durable]))
    text = generate_latest(registry).decode()
    assert 'celery_durable_limiter_in_use{key="",limiter="one"' in text
    assert (
        "celery_durable_limiter_waiting" in text and "celery_durable_limiter_wait_seconds" in text
    )
