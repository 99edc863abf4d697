"""The schedules' operator API, declared once: what ``celery -A app durable schedules ...``
and the dashboard's schedules page do. ``Durable`` inherits it.

Example::

    durable.pause_schedule("report-eu")                            # a Durable is one
    ScheduleOperations.of(operations).trigger_schedule("report-eu")  # from any Operations
"""

from __future__ import annotations

import datetime as dt

from celery_durable.errors import InvalidArgument
from celery_durable.ops.operations import Operations
from celery_durable.schedules import firing
from celery_durable.schedules.store import SCHEDULES, ScheduleRow


class ScheduleOperations(Operations):
    """The operations on one runtime's schedules."""

    def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule of the namespace, with its next firing time, last run and counts."""
        return SCHEDULES.of(self.runtime.store).list_schedules()

    def pause_schedule(self, name: str) -> None:
        """Stop the schedule firing until ``resume_schedule``."""
        self._set_paused(name, True)

    def resume_schedule(self, name: str) -> None:
        """Let a paused schedule fire again."""
        self._set_paused(name, False)

    def _set_paused(self, name: str, paused: bool) -> None:
        if not SCHEDULES.of(self.runtime.store).set_schedule_paused(name, paused):
            raise InvalidArgument(f"no schedule named {name!r}")

    def trigger_schedule(self, name: str) -> str:
        """Start a run of the schedule now, with an id of its own; returns the run's id."""
        return firing.trigger(self.runtime, name)

    def backfill_schedule(self, name: str, start: dt.datetime, end: dt.datetime) -> list[str]:
        """Start the schedule's firing times in ``[start, end]`` that never fired, each once;
        returns the runs started."""
        return firing.backfill(self.runtime, name, start, end)
