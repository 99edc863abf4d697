"""CPU time by component (from /proc), to see where a measurement's time went.

Components: ``driver`` (this process), ``worker`` (the benchmark worker's process groups),
``postgres`` (every postgres process: backends, WAL writer, checkpointer), ``redis``, and
``other``: everything else on the machine, i.e. interference (and kernel threads).
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")

Snapshot = dict[int, tuple[str, int, float]]


def snapshot() -> Snapshot:
    """pid -> (component hint, process group, CPU seconds so far) of every process."""
    out: Snapshot = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[2] is the process group; [11], [12] are utime, stime (ticks).
        cpu = (int(fields[11]) + int(fields[12])) / _TICK
        if cmd.startswith(b"postgres"):
            hint = "postgres"
        elif b"redis-server" in cmd:
            hint = "redis"
        else:
            hint = "other"
        out[int(proc.name)] = (hint, int(fields[2]), cpu)
    return out


def delta(before: Snapshot, after: Snapshot, worker_groups: set[int]) -> dict[str, float]:
    """CPU seconds spent per component between two snapshots."""
    me = os.getpid()
    spent: dict[str, float] = {"driver": 0.0, "worker": 0.0, "postgres": 0.0, "redis": 0.0}
    spent["other"] = 0.0
    for pid, (hint, group, cpu) in after.items():
        used = cpu - before.get(pid, (hint, group, 0.0))[2]
        if used <= 0:
            continue
        if pid == me:
            key = "driver"
        elif group in worker_groups:
            key = "worker"
        else:
            key = hint
        spent[key] += used
    return spent
