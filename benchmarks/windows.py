"""Commit windows: the commits the cluster made while a workload ran (or while nothing
did), counted by transaction id, with what else happened meanwhile.

Example::

    window = commit_window(b, lambda: run_workflows(100))
    idle = idle_window(b, idle_seconds=15.0)
    net = window.others - idle.others / idle.seconds * window.seconds
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from benchmarks.db import Monitor
from benchmarks.workers import wait_until

# Commits are counted by transaction id (see ``Window``): every one of the workload's has
# committed when its last run is seen finished, with no statistics to wait for. Work that the
# workload sets off after that (none is expected) has this long to show before a window ends.
TRAILING_SECONDS = 1.0


class Watcher(Protocol):
    """What a window needs of the measurements' ``Bench``.

    Declared here, not imported from ``measure``, because ``measure`` imports this module:
    the imports go one way."""

    @property
    def monitor(self) -> Monitor: ...

    @property
    def tag(self) -> str: ...  # the benchmark's own application_name: not foreign


@dataclass
class Window:
    """One interval of committed transactions, with what else happened in it.

    A commit here is a transaction that was assigned a transaction id (it wrote) and
    committed: of the ids from a snapshot's xmax at the start to one at the end, those whose
    ``pg_xact_status`` is committed. Exact as soon as they finished, where
    ``pg_stat_database.xact_commit`` gets a PG15 backend's count only when it flushes its
    statistics (within 10 s of going idle). Read-only transactions get no id and are not
    counted: the driver's monitoring statements, idle polls; every transaction of a
    workflow's path writes. Ids are cluster-wide: a window in which another database had
    a session start, end or run a statement is not clean."""

    seconds: float
    commits: int
    aborted: int
    foreign_active_sessions: int
    foreign_new_sessions: int
    other_databases_busy: int
    settled: bool

    @property
    def others(self) -> int:
        """Commits not made by the driver (its monitoring statements only read): all."""
        return self.commits

    @property
    def clean(self) -> bool:
        """No other program opened a session here or used another database, and every
        transaction of the window finished in time."""
        return self.foreign_new_sessions == 0 and self.other_databases_busy == 0 and self.settled

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "clean": self.clean}


def _settle(b: Watcher, since: float, first: int, timeout: float = 30.0) -> tuple[bool, int]:
    """Wait until TRAILING_SECONDS have passed since ``since`` (monotonic), then take a
    snapshot's xmax and wait until no id from ``first`` up to it is in progress. Returns
    whether that happened before ``timeout``, and that xmax."""
    wait_until(
        lambda: time.monotonic() - since >= TRAILING_SECONDS,
        TRAILING_SECONDS + 5,
        0.05,
        "work after the workload",
    )
    _, end = b.monitor.xids()

    def none_running() -> bool:
        xmin, _ = b.monitor.xids()
        return xmin >= end or not b.monitor.id_statuses(first, end).get("in progress")

    try:
        wait_until(none_running, timeout, 0.05, "the window's transactions to finish")
        return True, end
    except TimeoutError:
        return False, end


def commit_window(b: Watcher, workload: Callable[[], None], idle_seconds: float = 0.0) -> Window:
    """xmax before, ``workload()`` (or ``idle_seconds`` of nothing), settle, xmax after; the
    ids in between that committed."""
    wall = time.time()
    s0 = b.monitor.sessions()
    other0 = b.monitor.other_databases()
    _, x0 = b.monitor.xids()
    t0 = time.monotonic()
    if idle_seconds:
        wait_until(
            lambda: time.monotonic() - t0 >= idle_seconds, idle_seconds + 5, 0.25, "idle window"
        )
    else:
        workload()
    # An idle window needs no time for trailing work.
    settled, x1 = _settle(b, t0 if idle_seconds else time.monotonic(), x0)
    seconds = time.monotonic() - t0
    statuses = b.monitor.id_statuses(x0, x1)
    new_sessions = b.monitor.sessions() - s0 - b.monitor.own_new_sessions(wall, b.tag)
    busy = b.monitor.other_databases_busy(wall)
    if b.monitor.other_databases() != other0:
        busy += 1  # a session of another database started or ended meanwhile
    return Window(
        seconds=seconds,
        commits=statuses.get("committed", 0),
        aborted=statuses.get("aborted", 0),
        foreign_active_sessions=b.monitor.foreign_sessions(wall, b.tag),
        foreign_new_sessions=max(0, new_sessions),
        other_databases_busy=busy,
        settled=settled and not statuses.get("in progress"),
    )


def idle_window(b: Watcher, idle_seconds: float, attempts: int = 3) -> Window:
    """``commit_window`` of ``idle_seconds`` of nothing, measured again (up to ``attempts``
    times) while it is not clean: commits are counted over the whole cluster, so another
    program writing meanwhile would be taken for the workers' idle rate."""
    for _ in range(attempts):
        window = commit_window(b, lambda: None, idle_seconds=idle_seconds)
        if window.clean:
            break
    return window
