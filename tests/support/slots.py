"""Moments and zones for the unit tests of periodic schedules (schedules/firing_times.py,
cron.py, interval.py): fixed datetimes, no clock."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from celery_durable.schedules.firing_times import Schedule

UTC = dt.timezone.utc
PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*fields: int) -> dt.datetime:
    return dt.datetime(*fields, tzinfo=UTC)


def walk(schedule: Schedule, start: dt.datetime, count: int) -> list[dt.datetime]:
    """The ``count`` slots after ``start``, by next_after."""
    found = []
    for _ in range(count):
        start = schedule.next_after(start)
        found.append(start)
    return found
