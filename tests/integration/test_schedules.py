"""Schedules with real workers: two workers (and this process) fire each one-second slot
once; a slot slower than its interval is skipped and the command line shows it; after
every worker was down, each catch-up policy fires what it says, each slot at most once;
a Postgres outage across several slots (a TCP proxy the test owns, cut) is a gap too.

Slots are read back from the store (``schedule_slots``) and from what each run's step
noted in Redis: a slot noted twice fired twice."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from typing import Any

from tests.support.cli import celery
from tests.support.proxy import TcpProxy
from tests.support.schedules import runs_of, slot_outcomes
from tests.support.services import PG_URL, unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker


def worker_of(app: Any, env: dict[str, str] | None = None) -> Worker:
    return Worker(
        "tests.apps.scheduled", env or {}, queues=app.QUEUE, name=unique("sch"), concurrency=2
    )


def noted(rds: Any, app: Any, schedule: str) -> list[str]:
    return list(rds.lrange(f"{app.KEY}:{schedule}", 0, -1))


def started_after(app: Any, schedule: str, since: float) -> list[Any]:
    return [s for s in runs_of(app.durable.runtime.store, schedule) if s.slot > since]


def test_two_workers_and_a_third_process_fire_each_slot_once(scheduled_app, rds):
    app = scheduled_app
    since = time.time()
    workers = [worker_of(app) for _ in range(2)]
    done = threading.Event()

    def third_process() -> None:  # this process declares and sweeps the schedules too
        while not done.is_set():
            app.durable.runtime.sweeper.sweep_once()
            time.sleep(0.2)

    sweeping = threading.Thread(target=third_process, daemon=True)
    try:
        for worker in workers:
            worker.wait_ready()
        sweeping.start()
        wait_until(lambda: len(started_after(app, "tick", since)) >= 12, 60, message="12 ticks")
        done.set()
        sweeping.join(10)
        slots = [s.slot for s in started_after(app, "tick", since)]
        # Past the start-up, every second has its run: none missing, none twice.
        steady = slots[2:]
        assert [b - a for a, b in zip(steady, steady[1:], strict=False)] == [1.0] * (
            len(steady) - 1
        )
        wait_until(lambda: len(noted(rds, app, "tick")) >= len(slots), 60, message="ran")
        seen = noted(rds, app, "tick")
        assert len(seen) == len(set(seen)), "a slot ran twice"
        # The async body's schedule fires as the plain one's.
        fired = wait_until(lambda: (n := noted(rds, app, "tick-async")) and len(n) >= 5 and n, 60)
        assert len(fired) == len(set(fired)), "an async slot ran twice"
        # The slow schedule's run takes 2.5 s: the slots meanwhile are skipped, and shown.
        wait_until(
            lambda: slot_outcomes(app.durable.runtime.store, "slow").get("skipped", 0) >= 2, 60
        )
        listed = celery("durable", "schedules", "--json", app="tests.apps.scheduled")
        assert listed.returncode == 0, listed.stderr
        rows = {row["name"]: row for row in map(json.loads, listed.stdout.splitlines())}
        assert rows["slow"]["skipped"] >= 2 and rows["slow"]["overlap"] == "skip"
        assert rows["tick"]["status"] == "active" and rows["tick"]["timing"] == "every 1s"
        table = celery("durable", "schedules", app="tests.apps.scheduled").stdout
        assert "slow" in table and "SKIPPED" in table
        # An operator's pause, trigger, backfill and resume, from the command line.
        store = app.durable.runtime.store

        def command(*args: str) -> Any:
            done = celery("durable", "schedules", *args, "--json", app="tests.apps.scheduled")
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        assert command("pause", "slow")["paused"] is True
        assert {row.name: row.paused for row in store.schedules.list_schedules()}["slow"] is True
        triggered = command("trigger", "slow")["run_id"]
        assert app.durable.get_handle(triggered).get(timeout=60)
        past = time.time() - 3600
        first = time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(past))
        last = time.strftime("%Y-%m-%dT%H:%M:02Z", time.gmtime(past))
        filled = command("backfill", "tick", "--from", first, "--to", last)["run_ids"]
        assert (
            len(filled) == 3
            and command("backfill", "tick", "--from", first, "--to", last)["run_ids"] == []
        )
        for run_id in filled:
            app.durable.get_handle(run_id).get(timeout=60)
        assert command("resume", "slow")["paused"] is False
    finally:
        done.set()
        for worker in workers:
            worker.kill()


def test_after_every_worker_was_down_each_catchup_policy_fires_what_it_says(scheduled_app, rds):
    app = scheduled_app
    worker = worker_of(app).wait_ready()
    policies = ("latest", "all", "none")
    try:
        for policy in policies:
            wait_until(lambda p=policy: noted(rds, app, f"gap-{p}"), 60, message=f"gap-{policy}")
    finally:
        worker.stop()
    last = {p: runs_of(app.durable.runtime.store, f"gap-{p}")[-1].slot for p in policies}
    down = time.time()
    wait_until(lambda: time.time() >= down + 8, 20, message="8 s of downtime")
    worker = worker_of(app).wait_ready()
    back = time.time()
    try:
        for policy in policies:
            wait_until(
                lambda p=policy: [s for s in started_after(app, f"gap-{p}", back + 1)],
                60,
                message=f"gap-{policy} after the restart",
            )
    finally:
        worker.kill()
    gap = {p: started_after(app, f"gap-{p}", last[p]) for p in policies}
    rows = {row.name: row for row in app.durable.runtime.store.schedules.list_schedules()}
    # latest: the gap's most recent slot only, then each slot on time again.
    first = gap["latest"][0]
    assert first.slot - last["latest"] >= 8 and rows["gap-latest"].missed >= 7
    # all: every slot of the gap, each once, in order.
    slots = [s.slot for s in gap["all"]]
    assert slots[: int(back - last["all"])] == [
        last["all"] + k + 1 for k in range(int(back - last["all"]))
    ]
    # none: none of the gap's slots more than the on-time 5 s late.
    assert gap["none"][0].slot >= back - 5.5 and rows["gap-none"].missed >= 2
    for policy in policies:
        seen = noted(rds, app, f"gap-{policy}")
        assert len(seen) == len(set(seen)), f"gap-{policy}: a slot ran twice"


def iso(slot: float) -> str:
    """A slot as a run of tests.apps.scheduled notes it (its schedules are in UTC)."""
    return dt.datetime.fromtimestamp(slot, dt.timezone.utc).isoformat()


def missed(app: Any, schedule: str) -> int:
    [row] = [
        row for row in app.durable.runtime.store.schedules.list_schedules() if row.name == schedule
    ]
    return int(row.missed)


def test_a_postgres_outage_across_several_slots_fires_one_run_for_the_gap(scheduled_app, rds):
    """The default catch-up ("latest") after the database was down for ~8 s: the worker
    (its database behind a proxy the test cuts) fires the gap's most recent slot once,
    counts the others as missed, and goes on firing each slot."""
    app = scheduled_app
    with TcpProxy.to_url(PG_URL) as proxy:
        worker = worker_of(app, {"CELERY_DURABLE_DATABASE_URL": proxy.url(PG_URL)})
        try:
            worker.wait_ready()
            wait_until(lambda: noted(rds, app, "gap-latest"), 60, message="gap-latest")
            missed_before = missed(app, "gap-latest")
            proxy.cut()
            cut = time.time()
            wait_until(lambda: proxy.refused >= 2, 30, message="the worker to try meanwhile")
            wait_until(lambda: time.time() >= cut + 8, 20, message="8 s of outage")
            proxy.restore()
            back = time.time()
            after = wait_until(
                lambda: started_after(app, "gap-latest", cut),
                60,
                message=lambda: f"gap-latest after the outage; log:\n{worker.log()[-4000:]}",
            )
            first = after[0]
            # The worker survived: it goes on firing, and the runs run.
            wait_until(
                lambda: len(started_after(app, "gap-latest", first.slot)) >= 3,
                30,
                message="gap-latest to go on firing",
            )
            later = [iso(s.slot) for s in started_after(app, "gap-latest", first.slot)]
            wait_until(
                lambda: {iso(first.slot), *later} <= set(noted(rds, app, "gap-latest")),
                60,
                message="the runs after the outage to run",
            )
        finally:
            worker.kill()
    fired = [s.slot for s in runs_of(app.durable.runtime.store, "gap-latest")]
    last = max(s for s in fired if s <= cut)
    # One run for the outage's slots: the first after it is the gap's most recent slot.
    gap = [s for s in fired if s > last]
    report = f"cut at {cut}, restored at {back}, last before {last}, then {gap[:5]}"
    assert gap[0] == first.slot and gap[0] >= cut + 7, report
    # The slots after it fire on time again, each second.
    assert [b - a for a, b in zip(gap, gap[1:3], strict=False)] == [1.0, 1.0], report
    assert missed(app, "gap-latest") - missed_before >= 5
    for schedule in ("tick", "gap-latest", "gap-all", "gap-none", "slow"):
        # No slot fired twice: one slot row, one run id each (the store's record).
        runs = runs_of(app.durable.runtime.store, schedule)
        assert len({s.slot for s in runs}) == len({s.run_id for s in runs}) == len(runs)
        # Nothing of the outage's slots, or later, ran twice. A run in flight at the cut
        # may run its step again (steps are at least once: its result was not recorded),
        # the same run redispatched by the sweeper, not a second firing.
        seen = [
            s for s in noted(rds, app, schedule) if dt.datetime.fromisoformat(s).timestamp() > cut
        ]
        assert len(seen) == len(set(seen)), f"{schedule}: a slot of the outage ran twice"
