"""CPU time by component (from /proc), to see where a measurement's time went.

Components: ``driver`` (this process), ``worker`` (the benchmark worker's process groups),
``postgres`` (every postgres process: backends, WAL writer, checkpointer; with the
benchmark's database named, only backends of that database), ``redis``, and ``other``:
everything else on the machine, i.e. interference (another database's sessions, kernel
threads).
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")

Snapshot = dict[int, tuple[str, int, float]]


def _postgres_hint(cmd: bytes, database: str | None) -> str:
    """``postgres``, or ``other`` for a client backend of another database (another
    program's sessions on a shared server are interference, not the benchmark's cost).
    A backend's command line: ``postgres: [<cluster>: ]<user> <database> <host>(<port>) ...``."""
    if database is None:
        return "postgres"
    words = cmd.replace(b"\0", b" ").decode(errors="replace").split()[1:]
    if words and words[0].endswith(":"):
        words = words[1:]  # Debian's "15/main:" cluster name
    client = len(words) >= 3 and (words[2].endswith(")") or words[2] == "[local]")
    return "other" if client and words[1] != database else "postgres"


def snapshot(database: str | None = None) -> Snapshot:
    """pid -> (component hint, process group, CPU seconds so far) of every process;
    with ``database``, backends of other databases count as ``other``."""
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
            hint = _postgres_hint(cmd, database)
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
