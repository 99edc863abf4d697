"""The basic test app plus the workflows of long-lived features (patched, sagas,
continue_as_new). Workers run it with ``-A tests.apps.longlived``.

``TEST_CODE_VERSION`` (v1, v2) in a worker's environment is the deployed code: v2 guards
its change with ``cd.patched("extra-step")``.
"""

from __future__ import annotations

import os

import celery_durable as cd
from celery_durable import PermanentError
from tests.apps.basic import app, block_while_flagged, durable, effect, numbered

__all__ = ["app", "durable"]


@durable.workflow(max_attempts=1)
def deployed(key: str) -> list[int]:
    first = numbered(key, 1)
    if os.environ.get("TEST_CODE_VERSION", "v1") == "v1":
        second = numbered(key, 2)
    elif cd.patched("extra-step"):
        second = numbered(key, 3)
    else:
        second = numbered(key, 2)
    cd.wait_for_signal("go")
    return [first, second, numbered(key, 4)]


@durable.step(max_attempts=2, backoff=0.05)
def refund(key: str, amount: int, result: str) -> str:
    effect(key, "refund")
    block_while_flagged(key, "refund")
    return f"refunded {result}"


def release(key: str, result: str) -> None:
    effect(key, "release")


@durable.step(compensate=release)
def reserve(key: str) -> str:
    effect(key, "reserve")
    return f"hold-{key}"


@durable.step(compensate=refund)
def charge(key: str, amount: int) -> str:
    effect(key, "charge")
    block_while_flagged(key, "charge")
    return f"receipt-{amount}"


@durable.step
def ship(key: str, mode: str) -> None:
    if mode == "fail":
        raise PermanentError("no courier")


@durable.workflow(max_attempts=2, retry_backoff=0.05)
def saga(key: str, mode: str) -> str:
    reserve(key)
    receipt = charge(key, 100)
    cd.set_state(receipt, key="receipt")
    if mode == "wait":
        cd.wait_for_signal("ship")
    ship(key, mode)
    return receipt


@durable.workflow
def looping(key: str, n: int = 0, total: int = 0) -> dict:
    got = cd.wait_for_signal("add")
    total += int(got)
    cd.set_state({"n": n, "total": total}, key="progress")
    if got == 0:
        return {"n": n, "total": total}
    cd.continue_as_new(key, n + 1, total)
