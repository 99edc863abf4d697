"""Cron schedules: an expression (its syntax: ``cron_syntax``) read in the local wall
time of a time zone, each matching wall-clock time firing once, at its first occurrence
(the rules: ``firing times``). A wall time the clock skips at spring-forward does not fire that
day; one it shows twice at fall-back fires the first time round only."""

from __future__ import annotations

import bisect
import calendar
import dataclasses
import datetime as dt

from celery_durable.core.validate import show
from celery_durable.errors import InvalidArgument
from celery_durable.schedules.cron_syntax import CronFields, parse_fields
from celery_durable.schedules.firing_times import EPOCH, UTC, Schedule, as_utc, zone

_SECOND = dt.timedelta(seconds=1)
_ZERO, _LAST = dt.timedelta(0), dt.timedelta(hours=23, minutes=59, seconds=59)
# What running past the hour, the minute or the second of a day carries into.
_CARRY = (dt.timedelta(days=1), dt.timedelta(hours=1), dt.timedelta(minutes=1))
# The Gregorian calendar repeats every 400 years: a cron that matches no day in 401 never will.
_YEARS = 401


def _at_or_after(values: tuple[int, ...], value: int) -> int | None:
    i = bisect.bisect_left(values, value)
    return values[i] if i < len(values) else None


def _at_or_before(values: tuple[int, ...], value: int) -> int | None:
    i = bisect.bisect_right(values, value)
    return values[i - 1] if i else None


@dataclasses.dataclass(frozen=True)
class Cron(Schedule):
    """A cron expression in a time zone, and the values its fields allow; build it with
    ``Cron.parse``."""

    expression: str
    tz: dt.tzinfo
    fields: CronFields
    # The same values as sets, for the common case of a value that is allowed.
    _sets: tuple[frozenset[int], ...] = dataclasses.field(init=False, repr=False, compare=False)
    _clock: tuple[tuple[tuple[int, ...], frozenset[int]], ...] = dataclasses.field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        f = self.fields
        coarsest_first = (f.months, f.days, f.weekdays, f.hours, f.minutes, f.seconds)
        object.__setattr__(self, "_sets", tuple(map(frozenset, coarsest_first)))
        object.__setattr__(self, "_clock", tuple((v, frozenset(v)) for v in coarsest_first[3:]))

    @classmethod
    def parse(
        cls, expression: str, argument: str = "cron", *, tz: dt.tzinfo | str | None = None
    ) -> Cron:
        """5 fields (minute hour day-of-month month day-of-week), or 6 with a LEADING
        seconds field, as in Quartz and Spring (``"*/10 * * * * *"``: every 10 s), or an
        alias: ``@yearly @annually @monthly @weekly @daily @midnight @hourly``.

        A field takes ``*``, ``5``, ``1-5``, ``*/15``, ``1-30/2``, ``5/15`` (5 to the end,
        every 15) and lists of these (``1,15,30``); month takes JAN-DEC and day-of-week
        SUN-SAT (any case), where 0 and 7 are both Sunday. As in Vixie cron, a day field is
        restricted unless it starts with ``*``, and when day-of-month and day-of-week are
        both restricted a day matches if EITHER does (``0 0 13 * FRI``: each 13th and each
        Friday). ``tz``: a ``tzinfo``, an IANA name, or None for UTC.
        """
        zone_info = tz if isinstance(tz, dt.tzinfo) else zone(tz)
        cron = cls(expression, zone_info, parse_fields(expression, argument))
        if cron._walk(dt.datetime(2000, 1, 1), forward=True) is None:
            raise InvalidArgument(
                f"{argument}={show(expression)} never fires: no date matches its "
                "day-of-month, month and day-of-week fields"
            )
        return cron

    def describe(self) -> str:
        return f"cron {self.expression!r} in {self.tz}"

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        fire_at = self._find(moment, forward=True)
        if fire_at is None:
            raise InvalidArgument(
                f"cron {self.expression!r} has no firing time after {moment} (year 9999)"
            )
        return fire_at

    def previous_at_or_before(self, moment: dt.datetime) -> dt.datetime | None:
        return self._find(moment, forward=False)

    def _find(self, moment: dt.datetime, forward: bool) -> dt.datetime | None:
        """The first firing time strictly after ``moment``, or the last at or before it."""
        now = as_utc(moment, "moment")
        local = now.astimezone(self.tz)
        change, shift = self._fold(now, local)
        if shift:  # in the repeated hour, whose wall times fired the first time round
            start = self._wall(change + shift if forward else change - 1)
        else:
            start = local.replace(tzinfo=None, microsecond=0) + (_SECOND if forward else _ZERO)
        while (wall := self._walk(start, forward)) is not None:
            if (fire_at := self._firing_time(wall)) is not None:
                return fire_at
            change = self._gap(wall)  # the clock skips it: go on from the other side
            start = self._wall(change if forward else change - 1)
        return None

    # Wall time and UTC: gaps (spring-forward) and folds (fall-back).

    def _firing_time(self, wall: dt.datetime) -> dt.datetime | None:
        """The first UTC instant the clock shows ``wall``; None if the clock skips it."""
        fire_at = wall.replace(tzinfo=self.tz).astimezone(UTC)
        return fire_at if fire_at.astimezone(self.tz).replace(tzinfo=None) == wall else None

    def _wall(self, timestamp: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(timestamp, self.tz).replace(tzinfo=None)

    def _change(self, before: int, after: int) -> int:
        """The first second in (before, after] on ``after``'s UTC offset (binary search)."""

        def offset(timestamp: int) -> dt.timedelta | None:
            return dt.datetime.fromtimestamp(timestamp, self.tz).utcoffset()

        target = offset(after)
        while after - before > 1:
            middle = (before + after) // 2
            if offset(middle) == target:
                after = middle
            else:
                before = middle
        return after

    def _fold(self, now: dt.datetime, local: dt.datetime) -> tuple[int, int]:
        """In a repeated hour: when the clock went back and by how many seconds; else 0, 0."""
        if not local.fold:
            return 0, 0
        first, second = local.replace(fold=0).utcoffset(), local.utcoffset()
        if first is None or second is None or first <= second:
            return 0, 0
        shift, timestamp = (first - second) // _SECOND, (now - EPOCH) // _SECOND
        return self._change(timestamp - shift, timestamp), shift

    def _gap(self, wall: dt.datetime) -> int:
        """For a wall time the clock skips: the second at which it jumped over it."""
        shifted = wall.replace(tzinfo=self.tz).astimezone(UTC)
        jump = (shifted.astimezone(self.tz).replace(tzinfo=None) - wall) // _SECOND
        timestamp = (shifted - EPOCH) // _SECOND
        before, after = sorted((timestamp, timestamp - jump))
        return self._change(before, after)

    # Matching wall times a field at a time: months, then days, hours, minutes, seconds.

    def _day_matches(self, day: int, weekday: int) -> bool:
        in_month, in_week = day in self._sets[1], weekday in self._sets[2]
        return (in_month or in_week) if self.fields.either_day else (in_month and in_week)

    def _day(self, t: dt.datetime, forward: bool) -> int | None:
        """The first matching day of ``t``'s month from ``t``'s day on (or the last up to
        it), if any."""
        weekday = t.isoweekday() % 7
        if self._day_matches(t.day, weekday):
            return t.day
        last, fields = calendar.monthrange(t.year, t.month)[1], self.fields
        if len(fields.weekdays) == 7 and not fields.either_day:  # the day of the month alone
            found = (_at_or_after if forward else _at_or_before)(fields.days, t.day)
            return found if found is not None and found <= last else None
        step = 1 if forward else -1
        for day in range(t.day, last + 1) if forward else range(t.day, 0, -1):
            if self._day_matches(day, weekday):
                return day
            weekday = (weekday + step) % 7
        return None

    def _walk(self, t: dt.datetime, forward: bool) -> dt.datetime | None:
        """The first matching wall time at or after ``t`` (whole seconds), or the last at or
        before it, within 401 years: a field at a time, coarsest first, each jump to the next
        value the field allows (or past its unit, which resets the finer fields)."""
        pick = _at_or_after if forward else _at_or_before
        first_year, last_year = (t.year, t.year + _YEARS) if forward else (t.year - _YEARS, t.year)
        try:
            while first_year <= t.year <= last_year:
                if t.month not in self._sets[0]:
                    month = pick(self.fields.months, t.month)
                    if forward:
                        t = dt.datetime(t.year + (month is None), month or 1, 1)
                    else:
                        t = _month_end(t.year - (month is None), month or 12)
                elif (day := self._day(t, forward)) != t.day:
                    if day:
                        t = dt.datetime(t.year, t.month, day) + (_ZERO if forward else _LAST)
                    elif forward:
                        t = _month_end(t.year, t.month) + _SECOND
                    else:
                        t = dt.datetime(t.year, t.month, 1) - _SECOND
                else:
                    clock = [t.hour, t.minute, t.second]
                    for level, (values, allowed) in enumerate(self._clock):
                        if clock[level] not in allowed:
                            t = _step(t, clock, level, pick(values, clock[level]), forward)
                            break
                    else:
                        return t
        except (OverflowError, ValueError):  # past year 9999, or before year 1
            pass
        return None


def _step(
    t: dt.datetime, clock: list[int], level: int, value: int | None, forward: bool
) -> dt.datetime:
    """``t`` with its hour, minute or second (``level`` 0, 1, 2) moved to ``value`` and the
    finer ones at their first (forward) or last value; None carries to the coarser one."""
    if value is None:
        clock[level:] = [0] * (3 - level)
    else:
        clock[level:] = [value] + [0 if forward else 59] * (2 - level)
    moved = dt.datetime(t.year, t.month, t.day, clock[0], clock[1], clock[2])
    if value is not None:
        return moved
    return moved + _CARRY[level] if forward else moved - _SECOND


def _month_end(year: int, month: int) -> dt.datetime:
    """The last second of a month."""
    return dt.datetime(year, month, calendar.monthrange(year, month)[1]) + _LAST
