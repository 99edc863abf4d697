"""Fault points armed per run for the test app's workers (``fault:<run id>`` in Redis):
the pool process that reaches the point SIGKILLs itself or raises, and marks it fired."""

from __future__ import annotations

import os
import signal
from typing import Any

from celery_durable.core import faults


def arm(rds, run_id: str, point: str, action: str, step: int | None = None) -> None:  # type: ignore[no-untyped-def]
    assert point in faults.POINTS
    rds.set(f"fault:{run_id}", f"{point}:{action}" + ("" if step is None else f":{step}"))


def fired(rds, run_id: str, point: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(rds.get(f"fired:{run_id}:{point}"))


def install_redis_faults(client) -> None:  # type: ignore[no-untyped-def]
    """In a worker app: arm the fault points from Redis (``SET fault:<run id>
    <point>:<action>[:<step>]``, see ``arm``). The action (``kill``: SIGKILL this pool
    process; ``stop``: SIGSTOP it; ``raise``: an exception) fires once."""

    def inject_fault(point: str, info: dict[str, Any]) -> None:
        key = f"fault:{info.get('run_id')}"
        armed = client.get(key)
        if not armed:
            return
        wanted_point, action, *step = armed.split(":")
        if wanted_point != point or (step and int(step[0]) != info.get("step_index")):
            return
        if not client.delete(key):
            return  # another process fired it first
        client.incr(f"fired:{info.get('run_id')}:{point}")
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "stop":  # paused until the test sends SIGCONT to the pid it finds here
            client.set(f"stopped:{info.get('run_id')}", os.getpid())
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        raise RuntimeError(f"injected fault at {point}")

    faults.install(inject_fault)
