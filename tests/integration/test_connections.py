"""How many Postgres connections a real worker holds, per process, under a mixed load.

The design (README, "Connections"): each pool process holds one connection, shared by the
thread that runs workflows, its lease heartbeat and its reads; the main process holds one,
for the sweeper. A worker of ``-c N`` prefork children therefore holds at most N + 1; a
``-P threads -c N`` worker, one process, at most one per thread plus the sweeper's: N + 1.
Each process that claims runs holds one more, idle: its proof of life (store/liveness.py),
so 2N + 1 and N + 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter

import sqlalchemy as sa

from celery_durable import WorkflowStatus
from tests.conftest import QUEUE
from tests.support.pgconns import connections_by_pid, named_url, process_tree
from tests.support.services import unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker

# The bound the README documents, from the design: one per pool process, one for the main
# process's sweeper; LISTEN connections only in processes that wait on handles.
PER_POOL_PROCESS = 1
PER_MAIN_PROCESS = 1
# And one, idle, per process that claims runs: its proof of life (store/liveness.py).
PROOF_OF_LIFE = 1


def mixed_load(app, key: str, seconds: float) -> list:  # type: ignore[no-untyped-def]
    """Steps, signal waits, state, timers, retries and failures, for ``seconds``."""
    handles: list = []
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        batch = [app.five_steps.delay(f"{key}-{n}-{i}") for i in range(6)]
        booking = app.booking.delay(f"{key}-{n}-b", 60)
        batch += [
            booking,
            app.retried_step.delay(f"{key}-{n}-r"),
            app.not_retried_step.delay(f"{key}-{n}-f"),
            app.sleeper.delay(f"{key}-{n}-s", 0.1),
        ]
        wait_until(lambda b=booking: b.status() is WorkflowStatus.WAITING, 30, message="wait")
        booking.signal("approval", {"by": "load"})
        for handle in batch:
            handle.wait(timeout=60)
        handles += batch
    return handles


def heartbeat_phase(app, rds, key: str, runs: int) -> None:  # type: ignore[no-untyped-def]
    """``runs`` workflows held in a step while their leases are renewed (heartbeat beats)."""
    keys = [f"{key}-held{n}" for n in range(runs)]
    for held in keys:
        rds.set(f"block:{held}:s2", "1")
    handles = [app.five_steps.delay(held) for held in keys]
    for held in keys:
        wait_until(lambda k=held: rds.get(f"started:{k}:s2"), 30, message="step 2 to start")
    leases = [h.record().due_at for h in handles]
    wait_until(
        lambda: all(h.record().due_at > lease for h, lease in zip(handles, leases, strict=True)),
        10,
        message="every held run's lease to be renewed",
    )
    for held in keys:
        rds.delete(f"block:{held}:s2")
    for handle in handles:
        assert handle.get(timeout=60) == [10, 20, 30, 40, 50]


def peak_connections(  # type: ignore[no-untyped-def]
    worker, application_name: str, app, rds, key: str, held: int, outsiders: list[str]
) -> Counter[int]:
    """Run the load, then hold runs for heartbeats; the most connections each worker
    process held meanwhile (sampled every 50 ms). Processes outside the worker that held
    one of its sessions are described in ``outsiders``."""
    peak: Counter[int] = Counter()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            counts = connections_by_pid(application_name, worker.proc.pid, outsiders)
            for pid, count in counts.items():
                peak[pid] = max(peak[pid], count)
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        handles = mixed_load(app, key, seconds=4.0)
        heartbeat_phase(app, rds, key, held)
    finally:
        stop.set()
        sampler.join(10)
    statuses = Counter(h.status() for h in handles)
    assert statuses[WorkflowStatus.SUCCEEDED] > 0 and statuses[WorkflowStatus.FAILED] > 0
    return peak


def test_a_prefork_worker_holds_one_connection_per_process(basic_app, start_worker, key, rds):
    application_name = unique("cdcount")
    concurrency = 2
    worker = start_worker("count", env={"CELERY_DURABLE_DATABASE_URL": named_url(application_name)})
    wait_until(
        lambda: len(process_tree(worker.proc.pid)) >= concurrency + 1, 30, message="children"
    )
    outsiders: list[str] = []
    peak = peak_connections(
        worker, application_name, basic_app, rds, key, held=concurrency, outsiders=outsiders
    )
    main, children = worker.proc.pid, [p for p in peak if p not in (0, worker.proc.pid)]
    report = (
        f"peak connections by pid (main {main}, 0 = not a worker process): {dict(peak)}; "
        f"held outside the worker by: {sorted(set(outsiders))}"
    )
    print(report)
    assert peak[0] == 0, report
    assert peak[main] <= PER_MAIN_PROCESS, report
    assert all(peak[child] <= PER_POOL_PROCESS + PROOF_OF_LIFE for child in children), report
    per_child = PER_POOL_PROCESS + PROOF_OF_LIFE
    assert sum(peak.values()) <= concurrency * per_child + PER_MAIN_PROCESS, report
    # The load reached every process: the bound is not met by idling.
    assert sum(1 for child in children if peak[child]) == concurrency, report


def test_a_threads_worker_holds_one_connection_per_thread_and_one_more(basic_app, key, rds):
    application_name = unique("cdcount")
    concurrency = 3
    worker = Worker(
        "tests.apps.basic",
        {"CELERY_DURABLE_DATABASE_URL": named_url(application_name)},
        queues=QUEUE,
        name=unique("threads"),
        concurrency=concurrency,
        extra=("-P", "threads"),
    )
    try:
        worker.wait_ready()
        outsiders: list[str] = []
        peak = peak_connections(worker, application_name, basic_app, rds, key, 2, outsiders)
    finally:
        worker.kill()
    report = (
        f"peak connections by pid (0 = not the worker): {dict(peak)}; "
        f"held outside the worker by: {sorted(set(outsiders))}"
    )
    print(report)
    assert peak[0] == 0, report
    bound = concurrency * PER_POOL_PROCESS + PER_MAIN_PROCESS + PROOF_OF_LIFE
    assert peak[worker.proc.pid] <= bound, report
    assert peak[worker.proc.pid] >= 1, report  # its sessions were found: the bound is not vacuous


def test_the_count_finds_who_holds_a_session_and_skips_one_already_closed():
    application_name = unique("cdcount")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    engine = sa.create_engine(named_url(application_name))
    try:
        with engine.connect():
            outsiders: list[str] = []
            assert connections_by_pid(application_name, other.pid, outsiders) == Counter(
                {other.pid: 0, 0: 1}
            )
            assert [line.split()[0] for line in outsiders] == [str(os.getpid())], outsiders
            assert connections_by_pid(application_name, os.getpid())[os.getpid()] == 1
        engine.dispose()
        # The server may list the session a moment longer; its socket is closed here.
        assert connections_by_pid(application_name, os.getpid())[os.getpid()] == 0
        assert connections_by_pid(application_name, other.pid)[0] == 0
    finally:
        other.kill()
        other.wait()


# Holds sockets whose local port is the given one, connected elsewhere: Linux lets another
# connection reuse a local port, so a port alone doesn't name a session's socket.
SAME_PORT_ELSEWHERE = """
import socket, sys, time
listener = socket.create_server(("127.0.0.1", 0))
held = []
for k in range(2, 32):
    client = socket.socket()
    client.bind((f"127.0.0.{k}", int(sys.argv[1])))
    client.connect(listener.getsockname())
    held += [client, listener.accept()[0]]
print("ready", flush=True)
time.sleep(60)
"""


def test_the_count_tells_a_session_from_other_sockets_on_its_port():
    application_name = unique("cdcount")
    engine = sa.create_engine(named_url(application_name))
    try:
        with engine.connect() as conn:
            port = conn.execute(sa.text("SELECT inet_client_port()")).scalar_one()
            other = subprocess.Popen(
                [sys.executable, "-c", SAME_PORT_ELSEWHERE, str(port)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert other.stdout is not None and other.stdout.readline() == "ready\n"
                outsiders: list[str] = []
                counts = connections_by_pid(application_name, os.getpid(), outsiders)
                assert counts[os.getpid()] == 1 and counts[0] == 0, (counts, outsiders)
            finally:
                other.kill()
                other.wait()
    finally:
        engine.dispose()
