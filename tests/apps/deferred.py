"""The test app with deferred steps (``commit="deferred"``): a worker started with
``-A tests.apps.deferred`` runs these and everything of ``tests.apps.basic``."""

from __future__ import annotations

import time

import celery_durable as cd
from tests.apps.basic import app, durable, effect

__all__ = ["app", "durable", "mixed", "all_deferred"]


@durable.step(commit="deferred")
def quick(key: str, n: int, pause: float = 0.0) -> int:
    effect(key, f"d{n}")
    time.sleep(pause)  # a step that takes a while: the buffer ages
    return n * 10


@durable.step
def strict(key: str, n: int) -> int:
    effect(key, f"s{n}")
    return n * 10


@durable.workflow
def mixed(key: str) -> list[int]:
    """Deferred 0 and 1 ride on strict 2; deferred 3 on set_state; deferred 4 on the settle."""
    out = [quick(key, 0), quick(key, 1), strict(key, 2), quick(key, 3)]
    cd.set_state({"done": 4}, key="progress")
    out.append(quick(key, 4))
    return out


@durable.workflow
def all_deferred(key: str, count: int, pause: float = 0.0) -> list[int]:
    return [quick(key, n, pause if n == 1 else 0.0) for n in range(count)]
