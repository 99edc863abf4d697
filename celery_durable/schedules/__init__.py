"""Schedules without beat: workflows started once per firing time of a cron or an interval,
from the firing-time arithmetic to the ``durable schedules`` report and dashboard page."""
