"""Count the Postgres connections each process of a worker holds.

``pg_stat_activity`` shows the client's TCP port, not its pid: the port is mapped to the
process whose file descriptors hold that socket (``/proc/net/tcp*`` gives the socket's
inode, ``/proc/<pid>/fd`` the inodes a process holds). Connections are picked by
``application_name``, so give the worker under test a name of its own
(``?application_name=...`` in its database URL) and other sessions on the server don't count.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import sqlalchemy as sa

from .services import PG_URL


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (Linux ``/proc``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
    return sorted(set(found))


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _inode_by_local_port() -> dict[int, str]:
    ports: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            port = int(fields[1].rsplit(":", 1)[1], 16)
            ports[port] = fields[9]
    return ports


def client_ports(application_name: str, url: str = PG_URL) -> list[int]:
    """The client ports of the server's sessions named ``application_name``."""
    engine = sa.create_engine(url, connect_args={"application_name": "celery_durable-counter"})
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT client_port FROM pg_stat_activity "
                    "WHERE application_name = :name AND client_port IS NOT NULL"
                ),
                {"name": application_name},
            ).all()
    finally:
        engine.dispose()
    return [int(r[0]) for r in rows]


def connections_by_pid(application_name: str, pids: list[int]) -> Counter[int]:
    """How many of the sessions named ``application_name`` each of ``pids`` holds; sessions
    held by none of them are counted under pid 0."""
    ports = client_ports(application_name)
    inode_of = _inode_by_local_port()
    owner = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    counts: Counter[int] = Counter({pid: 0 for pid in pids})
    for port in ports:
        counts[owner.get(inode_of.get(port, ""), 0)] += 1
    return counts
