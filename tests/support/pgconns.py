"""Count the Postgres connections each process of a worker holds.

``pg_stat_activity`` shows the client's TCP port, not its pid: the client's port and the
server's name the socket, which is mapped to the process whose file descriptors hold it
(``/proc/net/tcp*`` gives the socket's inode, ``/proc/<pid>/fd`` the inodes a process
holds). Connections are picked by ``application_name``, so give the worker under test a
name of its own (``?application_name=...`` in its database URL, :func:`named_url`) and
other sessions on the server don't count.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import sqlalchemy as sa

from .services import PG_URL


def named_url(application_name: str, url: str = PG_URL) -> str:
    """``url`` with the sessions it opens named ``application_name``."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}application_name={application_name}"


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


_ESTABLISHED = "01"


def _tcp_sockets() -> dict[tuple[int, int], list[tuple[str, str]]]:
    """The state and inode of each TCP socket on this host, by its local and remote port.
    Linux lets connections to different peers share a local port, so the pair is what
    names a session's socket (and two sockets that differ only in address share it). A
    socket its process has closed is no longer established and has no inode, though the
    server may still list the session for a moment."""
    sockets: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote = (int(f.rsplit(":", 1)[1], 16) for f in fields[1:3])
            sockets.setdefault((local, remote), []).append((fields[3], fields[9]))
    return sockets


def _live(entries: list[tuple[str, str]]) -> list[str]:
    return [inode for state, inode in entries if state == _ESTABLISHED and inode != "0"]


def _holders(inode: str) -> list[int]:
    """Every process on the machine that holds the socket ``inode``."""
    pids = (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return [pid for pid in pids if inode in _socket_inodes(pid)]


def _describe(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        command = "(gone)"
    return f"{pid} {command[:160].strip()}"


def _sessions(application_name: str, url: str) -> list[tuple[int, tuple[int, int]]]:
    """The backend pid and the (client, server) ports of each of the server's sessions
    named ``application_name``."""
    engine = sa.create_engine(url, connect_args={"application_name": "celery_durable-counter"})
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT pid, client_port, inet_server_port() FROM pg_stat_activity "
                    "WHERE application_name = :name AND client_port IS NOT NULL"
                ),
                {"name": application_name},
            ).all()
    finally:
        engine.dispose()
    return [(int(r[0]), (int(r[1]), int(r[2]))) for r in rows]


def client_ports(application_name: str, url: str = PG_URL) -> list[tuple[int, int]]:
    """The client and server ports of the server's sessions named ``application_name``."""
    return [ports for _, ports in _sessions(application_name, url)]


def backends_held_by(pid: int, application_name: str, url: str = PG_URL) -> list[int]:
    """The backend pids of the sessions named ``application_name`` whose client socket
    process ``pid`` holds: a process's own sessions, among others' of the same name."""
    sessions = _sessions(application_name, url)
    sockets = _tcp_sockets()
    held = _socket_inodes(pid)
    return [
        backend for backend, ports in sessions if held.intersection(_live(sockets.get(ports, [])))
    ]


def connections_by_pid(
    application_name: str, root: int, outsiders: list[str] | None = None
) -> Counter[int]:
    """How many of the sessions named ``application_name`` each process of ``root``'s tree
    holds. A session held by no process of the tree, or whose socket isn't on this host,
    counts under pid 0, and ``outsiders`` says who holds it; one whose socket was closed
    while it was looked up (the server lists a session until its backend has seen the
    close) doesn't count."""
    pids = process_tree(root)
    sessions = client_ports(application_name)
    sockets = _tcp_sockets()
    owner = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    counts: Counter[int] = Counter({pid: 0 for pid in pids})
    for ports in sessions:
        entries = sockets.get(ports, [])
        live = _live(entries)
        if not live:
            if entries:
                continue  # closed by its process, not yet by the server
            counts[0] += 1
            if outsiders is not None:
                outsiders.append(f"client port {ports[0]}: no such socket on this host")
            continue
        owned = [owner[inode] for inode in live if inode in owner]
        if owned:
            counts[owned[0]] += 1
            continue
        # Not in the tree as it was: a child forked since, a socket closed since, or a
        # process that isn't the worker's.
        holders = [pid for inode in live for pid in _holders(inode)]
        tree = process_tree(root)
        in_tree = [pid for pid in holders if pid in tree]
        if in_tree:
            counts[in_tree[0]] += 1
        elif holders:
            counts[0] += 1
            if outsiders is not None:
                outsiders.extend(_describe(pid) for pid in holders)
    return counts
