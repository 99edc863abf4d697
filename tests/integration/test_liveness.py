"""A dead worker's runs resume at once, a paused one's wait for its lease (``store/liveness``).

Workers here hold a 30 s lease: a run resumed well within it was taken over because its
owner's proof of life went with its process (a redelivery's claim, or a sweep), not
because the lease ran out. Workers are started per test: tests kill, stop or cut them off.
Each way a worker dies: SIGKILL of the worker, of one pool process (the OOM killer), a cold
shutdown (SIGQUIT), a pool process recycled by --max-tasks-per-child. Where Postgres can't
tell (a paused worker, a host cut off by the network), the lease decides, as before.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.proxy import TcpProxy
from tests.support.services import PG_URL, effects
from tests.support.waiting import wait_until
from tests.support.workers import Worker

LONG_LEASE = {"CELERY_DURABLE_LOCK_TIMEOUT": "30"}
# Well within the lease: the takeover, not the lease's expiry, resumed the run.
WITHIN = 10.0
STEPS = [10, 20, 30, 40, 50]


def owner_pid(handle) -> int:  # type: ignore[no-untyped-def]
    """The pid of the process holding the run's lease (``host:pid:uuid8:live``)."""
    owner = wait_until(lambda: handle.record().owner, 30, message="the run's owner")
    assert owner.endswith(":live"), owner  # it declared a proof of life
    return int(owner.split(":")[1])


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def start_mid_step(basic_app, rds, key):  # type: ignore[no-untyped-def]
    rds.set(f"block:{key}:s3", "1")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s3"), 30, message="step 3 to start")
    return handle


def resumed_within(rds, key: str, since: float) -> float:  # type: ignore[no-untyped-def]
    """Seconds from ``since`` until step 3 ran again; fails if not well within the lease."""
    wait_until(lambda: effects(rds, key, "s3") >= 2, WITHIN, message="step 3 to run again")
    return time.monotonic() - since


@pytest.mark.parametrize("death", ["sigkill", "cold shutdown"])
def test_a_dead_worker_s_run_resumes_on_another_well_within_the_lease(
    basic_app, start_worker, key, rds, death
):
    workers = start_worker.together({"name": "dead", "env": LONG_LEASE}, {"env": LONG_LEASE})
    handle = start_mid_step(basic_app, rds, key)
    pid = owner_pid(handle)
    by_main = {w.proc.pid: w for w in workers}
    victim = by_main[parent_of(pid)]
    (survivor,) = (w for w in workers if w is not victim)
    killed_at = time.monotonic()
    if death == "sigkill":
        victim.kill()  # main process and pool children, at once
    else:
        victim.proc.send_signal(signal.SIGQUIT)  # Celery's cold shutdown: tasks are cut off
    resumed_within(rds, key, killed_at)  # step 3 blocks again, on its new owner
    assert parent_of(owner_pid(handle)) == survivor.proc.pid
    rds.delete(f"block:{key}:s3")
    assert handle.get(timeout=60) == STEPS
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1, 1, 2, 1, 1]
    record = handle.record()
    # A cold shutdown's pool process may give its lease back as it exits (no recovery).
    assert (record.attempts, record.recoveries) in ((1, 1), (1, 0) if death != "sigkill" else ())
    assert survivor.proc.poll() is None
    victim.wait_exit(30)


def test_a_sigkilled_pool_process_s_run_resumes_well_within_the_lease(
    basic_app, start_worker, key, rds
):
    worker = start_worker("oom", env=LONG_LEASE)
    handle = start_mid_step(basic_app, rds, key)
    pid = owner_pid(handle)
    assert parent_of(pid) == worker.proc.pid
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)  # the OOM killer's choice: one pool process
    resumed_within(rds, key, killed_at)  # step 3 blocks again, on its new owner
    assert owner_pid(handle) != pid
    rds.delete(f"block:{key}:s3")
    assert handle.get(timeout=60) == STEPS
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1, 1, 2, 1, 1]
    assert (handle.record().attempts, handle.record().recoveries) == (1, 1)


def lease_stands_until_it_expires(basic_app, rds, key, handle):  # type: ignore[no-untyped-def]
    """Every look before the lease runs out finds the run still its owner's; then the run
    resumes elsewhere, as a recovery."""
    store = basic_app.durable.runtime.store
    due_at = handle.record().due_at
    assert due_at is not None

    def untouched_until_due() -> bool:
        now = store.now()
        assert effects(rds, key, "s3") == 1, f"taken over {due_at - now:.1f}s early"
        return now >= due_at - 0.5

    wait_until(untouched_until_due, LEASE + 10, 0.1, "the lease to run out")
    assert handle.get(timeout=60) == STEPS
    assert handle.record().recoveries == 1


LEASE = 8.0
SHORT_LEASE = {"CELERY_DURABLE_LOCK_TIMEOUT": str(LEASE)}


def test_a_paused_worker_keeps_its_lease_until_it_expires(basic_app, start_worker, key, rds):
    paused: Worker
    paused, _other = start_worker.together(
        {"name": "paused", "env": SHORT_LEASE}, {"env": SHORT_LEASE}
    )
    handle = start_mid_step(basic_app, rds, key)
    if parent_of(owner_pid(handle)) != paused.proc.pid:
        paused, _other = _other, paused
    os.killpg(paused.proc.pid, signal.SIGSTOP)  # alive: its sessions and locks stay
    try:
        rds.delete(f"block:{key}:s3")
        lease_stands_until_it_expires(basic_app, rds, key, handle)
    finally:
        os.killpg(paused.proc.pid, signal.SIGCONT)


def test_a_worker_cut_off_by_the_network_keeps_its_lease_until_it_expires(
    basic_app, start_worker, key, rds
):
    """Its connections to Postgres go through a proxy that stops forwarding and keeps both
    sockets open: the server still holds its session and its proof of life, so only the
    lease (which it can't renew) lets the run go."""
    with TcpProxy.to_url(PG_URL) as proxy:
        cut_env = {**SHORT_LEASE, "CELERY_DURABLE_DATABASE_URL": proxy.url(PG_URL)}
        cut = start_worker("cut", env=cut_env)
        handle = start_mid_step(basic_app, rds, key)
        assert parent_of(owner_pid(handle)) == cut.proc.pid
        start_worker("direct", env=SHORT_LEASE)
        proxy.freeze()
        rds.delete(f"block:{key}:s3")
        lease_stands_until_it_expires(basic_app, rds, key, handle)


def test_pool_processes_recycled_by_max_tasks_per_child_keep_no_lease(
    basic_app, start_worker, key, rds
):
    """A pool process exits after each task: its runs suspend or finish first, and a run it
    leaves leased would wait out the 30 s lease. Runs in a row, each claimed by a fresh
    process, all finish without a recovery, every step once."""
    worker = start_worker(
        "recycled", env=LONG_LEASE, concurrency=1, extra=("--max-tasks-per-child=1",)
    )
    handles = [basic_app.five_steps.delay(f"{key}-{n}") for n in range(3)]
    for handle in handles:
        assert handle.get(timeout=60) == STEPS
        assert handle.record().recoveries == 0  # none was left leased and taken over
    for n in range(3):
        assert [effects(rds, f"{key}-{n}", f"s{i}") for i in range(1, 6)] == [1] * 5
    assert worker.proc.poll() is None
