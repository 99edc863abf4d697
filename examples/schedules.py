"""Schedules without beat, on the embedded default.

Run it (no server needed)::

    python examples/schedules.py

A schedule declared in code fires once a second from the worker's sweeper (no beat
process); each run gets its slot as ``scheduled_for``. A ``beat_schedule`` entry naming a
workflow becomes a schedule too. The ``durable schedules`` command lists both and pauses
one.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

from celery import Celery
from scratch import data_dir, file_broker, worker

from celery_durable import Durable

DATA = data_dir("SCHEDULES_DIR", driver=__name__ == "__main__")


app = Celery("schedules", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


# --8<-- [start:schedule]
@durable.schedule(every=1, tz="Europe/Paris", name="heartbeat")  # or cron="*/5 * * * *"
@durable.workflow
def heartbeat(scheduled_for: dt.datetime) -> dict:
    # The slot: an aware datetime in the schedule's zone.
    return {"slot": scheduled_for.isoformat(), "zone": str(scheduled_for.tzinfo)}
    # --8<-- [end:schedule]


@durable.workflow
def report(region: str) -> str:
    return f"report for {region}"


# --8<-- [start:beat]
app.conf.beat_schedule = {
    "report-eu": {"task": report.name, "schedule": 2.0, "args": ("eu",)},
}
durable.schedules_from_beat(app.conf.beat_schedule)  # no beat process needed any more
# --8<-- [end:beat]


def finished(workflow: str, count: int) -> list[str]:
    """The ids of the first ``count`` runs of ``workflow`` to succeed, oldest first."""
    deadline = time.monotonic() + 60
    while True:
        runs = durable.list_runs("succeeded", workflow).runs
        if len(runs) >= count:
            return sorted(run.id for run in runs)[:count]
        if time.monotonic() > deadline:
            raise SystemExit(f"{workflow}: {len(runs)} runs succeeded within 60 s")
        time.sleep(0.1)


def cli(*arguments: str) -> str:
    command = [sys.executable, "-m", "celery", "-A", "schedules", "durable", *arguments]
    done = subprocess.run(
        command, cwd=Path(__file__).parent, capture_output=True, text=True, check=True
    )
    return done.stdout


def main() -> None:
    durable.migrate()
    with worker("schedules", "SCHEDULES_DIR", DATA, "-c", "2", "--loglevel=WARNING"):
        runs = finished(heartbeat.name, 3)
        results = [durable.get_handle(run).get() for run in runs]
        slots = [dt.datetime.fromisoformat(result["slot"]) for result in results]
        print("heartbeat runs:", len(runs))
        print("slot zone:", {result["zone"] for result in results})
        utc = [slot.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") for slot in slots]
        print("ids name their slots:", runs == [f"schedule:heartbeat:{text}" for text in utc])
        print("slots on whole seconds:", all(slot.microsecond == 0 for slot in slots))
        (eu,) = finished(report.name, 1)
        print(f"{eu.rsplit(':', 3)[0]}: {durable.get_handle(eu).get()}")
        print(cli("schedules", "pause", "heartbeat").strip())
        print(cli("schedules"), end="")


if __name__ == "__main__":
    main()
