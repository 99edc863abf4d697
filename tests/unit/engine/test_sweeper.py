"""The sweep is its passes: every pass, the engine's and each feature's, is one
``SweepPass`` in ``runtime.sweep_passes``, and ``sweep_once`` runs exactly those, in order.
A real Durable on SQLite, its messages going to an in-memory broker nobody consumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery import Celery

from celery_durable import Durable
from celery_durable.engine.runtime_view import SweepPass

EVERY_PASS = [
    "due runs",
    "signalled runs",
    "updated runs",
    "items",
    "limiter slots",
    "deadlines",
    "owed reports",
    "revokes",
    "retention",
    "schedules",
]


@pytest.fixture
def durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Durable:
    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    made = Durable(Celery("sweeps", broker="memory://"), database_url=f"sqlite:///{tmp_path}/s.db")
    made.migrate()
    return made


def test_every_pass_of_the_sweep_is_a_named_sweep_pass(durable: Durable) -> None:
    passes = durable.runtime.sweep_passes
    assert all(isinstance(each, SweepPass) for each in passes)
    assert [each.name for each in passes] == EVERY_PASS


def test_a_sweep_runs_each_pass_once_in_order_and_counts_what_they_publish(
    durable: Durable,
) -> None:
    ran: list[str] = []

    def recorded(name: str, result: object) -> SweepPass:
        def act() -> object:
            ran.append(name)
            return result

        return SweepPass(name, act, publishes=isinstance(result, int))

    durable.runtime.sweep_passes[:] = [
        recorded("first", 2),
        recorded("second", ["not a count"]),
        recorded("third", 3),
    ]
    assert durable.runtime.sweeper.sweep_once() == 5
    assert ran == ["first", "second", "third"]
