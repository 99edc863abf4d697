"""The dashboard's schedules page and its actions: what ``durable schedules`` lists (the
same ``schedule_json``), and pause, resume and trigger,
which call the same operations as ``durable schedules pause|resume|trigger``.
``wiring.py`` registers ``SCHEDULES_PAGE`` and ``SCHEDULE_ACTIONS`` with the dashboard.

Example::

    rows = schedules_page(durable)               # one dict a schedule, by name
    message = act_on_schedule(durable, "pause", "report-eu")   # DurableError if it cannot
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery_durable.errors import InvalidArgument
from celery_durable.ops import console
from celery_durable.ops.wing_parts import DashboardActions, DashboardPage
from celery_durable.schedules.operations import ScheduleOperations
from celery_durable.schedules.report import schedule_json

if TYPE_CHECKING:
    from celery_durable.ops.operations import Operations

ACTIONS = ("pause", "resume", "trigger")


def schedules_page(durable: Operations) -> list[dict[str, Any]]:
    """Each schedule of the namespace as ``durable schedules --json`` says it, with its
    lag and firing times for people."""
    rows = []
    for row in ScheduleOperations.of(durable).list_schedules():
        shown = schedule_json(row)
        shown["lag"] = console.span(row.last_lag) if row.last_lag is not None else None
        shown["next_slot_shown"] = console.iso(row.next_slot, False)
        shown["last_slot_shown"] = console.iso(row.last_slot, False)
        rows.append(shown)
    return rows


def act_on_schedule(durable: Operations, verb: str, name: str) -> str:
    """Pause, resume or trigger the schedule ``name``; returns what happened, or raises
    InvalidArgument (no such schedule, its workflow not declared here)."""
    if not name:
        raise InvalidArgument("give the schedule's name")
    durable = ScheduleOperations.of(durable)
    if verb == "trigger":
        run_id = durable.trigger_schedule(name)
        return f"Triggered {name!r}: run {run_id} started."
    if verb == "pause":
        durable.pause_schedule(name)
        return f"Paused {name!r}: it no longer fires."
    durable.resume_schedule(name)
    return f"Resumed {name!r}: it fires again."


SCHEDULES_PAGE = DashboardPage(
    "schedules", "/schedules", "Schedules", "schedules.html", schedules_page
)
SCHEDULE_ACTIONS = DashboardActions(
    "schedule_action", "/schedules/<verb>", ACTIONS, act_on_schedule, "schedules"
)
