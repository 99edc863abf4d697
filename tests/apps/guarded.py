"""tests.apps.basic with pickle accepted (``TEST_ACCEPT_PICKLE=1``, as a worker of
tests/integration/test_delivery_guard.py runs it) and the workflows of the nesting-depth
tests: what a worker's main process lets through to its pool (issue 41, points 1 and 10)."""

from __future__ import annotations

import os
from typing import Any

import celery_durable as cd
from tests.apps.basic import app, durable

if os.environ.get("TEST_ACCEPT_PICKLE"):
    app.conf.accept_content = ["json", "pickle"]


def nested(depth: int) -> list[Any]:
    """``depth`` lists, one inside the other: ``json.loads("[" * depth + "]" * depth)``."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@durable.step(name="tests.guarded.depth_of")
def depth_of(value: Any) -> int:
    return 0


@durable.workflow(name="tests.guarded.deep_item", max_attempts=3)
def deep_item(depth: int) -> list[int]:
    """Maps over one item nested ``depth`` levels deep, made inside the body."""
    return cd.map(depth_of, [nested(depth)])


@durable.workflow(name="tests.guarded.echo")
def echo(value: Any) -> Any:
    return value
