"""Deferred steps on the embedded default (SQLite, eager mode), and their bad settings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import celery_durable as cd
from celery_durable.core.config import DurableConfig
from celery_durable.errors import ConfigurationError
from tests.support.workers import ROOT


def test_deferred_and_strict_steps_replay_alike(durable):
    calls: list[str] = []

    @durable.step(commit="deferred")
    def price(n: int) -> int:
        calls.append(f"price{n}")
        return n * 2

    @durable.step
    def charge(amount: int) -> str:
        calls.append("charge")
        return f"charged {amount}"

    @durable.workflow
    def checkout(n: int) -> dict:
        amount = price(n) + price(n + 1)
        cd.set_state({"amount": amount}, key="amount")
        receipt = charge(amount)
        return {"receipt": receipt, "tax": price(amount)}

    handle = checkout.delay(3)
    assert handle.get(timeout=5) == {"receipt": "charged 14", "tax": 28}
    assert calls == ["price3", "price4", "charge", "price14"]
    steps = durable.runtime.store.load_steps(handle.id)
    assert [(s.name, s.status, s.output) for s in steps.values()] == [
        (price.name, "ok", "6"),
        (price.name, "ok", "8"),
        (charge.name, "ok", '"charged 14"'),
        (price.name, "ok", "28"),
    ]


def test_bad_commit_modes_name_the_argument(durable):
    with pytest.raises(ValueError, match="commit='later' is not one of 'each', 'deferred'"):

        @durable.step(commit="later")
        def nope() -> None: ...

    with pytest.raises(ValueError, match="routed step .*commit='deferred'"):

        @durable.step(queue="gpu", commit="deferred")
        def remote() -> None: ...


def test_the_buffer_bounds_are_checked_settings():
    with pytest.raises(ConfigurationError, match="durable_deferred_max_steps"):
        DurableConfig.from_sources({"deferred_max_steps": "many"}, environ={})
    config = DurableConfig.from_sources(
        environ={"CELERY_DURABLE_DEFERRED_MAX_AGE": "0.5", "CELERY_DURABLE_DEFERRED_MAX_STEPS": "7"}
    )
    assert (config.deferred_max_age, config.deferred_max_steps) == (0.5, 7)


SCRIPT = """
from celery import Celery
from celery_durable import Durable

app = Celery("shop", broker="memory://")
durable = Durable(app, database_url="sqlite:///unused.sqlite3")


@durable.step
def reserve(order: int) -> int:
    return order


@durable.workflow
def checkout(order: int) -> int:
    return reserve(order)


if __name__ == "__main__":
    print(reserve.name, checkout.name)
"""


def test_steps_of_a_script_are_named_like_its_workflows_after_the_app(tmp_path):
    (tmp_path / "shop_script.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "shop_script.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["shop.reserve", "shop.checkout"]
    assert not (tmp_path / "unused.sqlite3").exists()
