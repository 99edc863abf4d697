"""The firing times of periodic schedules (their columns' older name: "slots"): what every
schedule answers (``Schedule``), the zone it is read in (``zone``) and the text of a firing
time (``firing_text``).
The two kinds are ``cron.Cron`` (expressions in a time zone) and ``interval.Interval``.

Pure and stateless: every worker's sweeper computes the same firing times from the schedule alone
and starts one run per firing time, with the id ``schedule:<name>:<firing_text(fire_at)>``.

Example::

    import datetime as dt
    from celery_durable.schedules.cron import Cron
    from celery_durable.schedules.interval import Interval

    nightly = Cron.parse("30 2 * * *", tz="Europe/Paris")
    now = dt.datetime(2026, 3, 28, 12, 0, tzinfo=dt.timezone.utc)
    nightly.next_after(now)  # 2026-03-30 00:30 UTC: the clock skips 02:30 on the 29th
    nightly.between(now - dt.timedelta(days=3), now, limit=1)  # [2026-03-28 01:30 UTC]
    Interval.parse("15m").next_after(now)  # 2026-03-28 12:15 UTC

Rules every schedule follows:

- Datetimes go in aware (any zone) and come out aware, in UTC; a cron's are whole seconds.
- A cron is evaluated in the local wall time of its zone, and **each matching wall-clock
  time fires once, at its first occurrence**. A wall time the clock skips at spring-forward
  (02:30 on 2026-03-29 in Europe/Paris) does not fire that day: it is not shifted. A wall
  time the clock shows twice at fall-back (02:30 on 2026-10-25 in Europe/Paris) fires at
  its first occurrence (``fold=0``, still summer time) only. So ``0 * * * *`` in
  Europe/Paris fires at 02:00 CEST (00:00 UTC) on 2026-10-25, not again at 02:00 CET,
  then at 03:00 CET (02:00 UTC); ``* * * * *`` is silent through the repeated hour.
- An interval's firing times are anchored at the Unix epoch: firing time k is ``k * seconds`` after
  1970-01-01T00:00:00Z (to the microsecond), so processes need no shared start time
  (``7m`` fires at whole multiples of 420 s since the epoch, not on the hour). Intervals
  ignore DST: every hour is 3600 s.
- ``between(after, until, limit)`` is the sweeper's question: the firing times in
  ``(after, until]``, the newest ``limit`` of them, oldest first, in O(limit).
"""

from __future__ import annotations

import abc
import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery_durable.core.validate import show
from celery_durable.errors import InvalidArgument

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
TICK = dt.timedelta(microseconds=1)


def zone(tz: str | None, argument: str = "tz") -> ZoneInfo:
    """The IANA time zone named ``tz`` (``"Europe/Paris"``); None is UTC."""
    if tz is None:
        return ZoneInfo("UTC")
    if isinstance(tz, str) and tz and tz.strip() == tz:
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise InvalidArgument(
        f"{argument}={show(tz)} is not a known IANA time zone: write a name such as "
        "'Europe/Paris', 'America/New_York' or 'UTC', or None for UTC"
    )


def firing_text(fire_at: dt.datetime) -> str:
    """A firing time in UTC ISO 8601 (``2026-03-29T01:30:00Z``): the same text in every process."""
    return as_utc(fire_at, "fire_at").isoformat().replace("+00:00", "Z")


def as_utc(moment: dt.datetime, argument: str) -> dt.datetime:
    """``moment`` in UTC, or InvalidArgument naming ``argument`` if it is naive."""
    if not isinstance(moment, dt.datetime) or moment.utcoffset() is None:
        raise InvalidArgument(f"{argument}={show(moment)} must be an aware datetime")
    return moment.astimezone(UTC)


def check_limit(limit: int) -> None:
    """InvalidArgument unless ``limit`` (firing times ``between`` returns) is an int >= 1."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"limit={show(limit)} must be an int of at least 1")


class Schedule(abc.ABC):
    """What the sweeper asks of a schedule: its firing times around a moment."""

    @abc.abstractmethod
    def next_after(self, moment: dt.datetime) -> dt.datetime:
        """The first firing time strictly after ``moment``, in UTC."""

    @abc.abstractmethod
    def previous_at_or_before(self, moment: dt.datetime) -> dt.datetime | None:
        """The last firing time at or before ``moment``, in UTC; None if there is none."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The schedule for people: ``"cron '0 2 * * *' in Europe/Paris"``, ``"every 15m"``."""

    def between(self, after: dt.datetime, until: dt.datetime, limit: int) -> list[dt.datetime]:
        """The firing times s with ``after < s <= until``, oldest first, but only the NEWEST
        ``limit`` of them: ``limit=1`` is catch-up "latest", a large limit "all" with a cap.
        It costs O(limit), however long the window."""
        check_limit(limit)
        start, fire_at = as_utc(after, "after"), self.previous_at_or_before(as_utc(until, "until"))
        found: list[dt.datetime] = []
        while fire_at is not None and fire_at > start and len(found) < limit:
            found.append(fire_at)
            fire_at = self.previous_at_or_before(fire_at - TICK)
        found.reverse()
        return found
