"""The firing times ("slots") of periodic schedules: cron expressions and fixed intervals.

Pure and stateless: every worker's sweeper computes the same slots from the schedule alone
and starts one run per slot, with the id ``schedule:<name>:<slot_text(slot)>``.

Example::

    import datetime as dt
    from celery_durable.core.slots import Cron, Interval

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
- An interval's slots are anchored at the Unix epoch: slot k is ``k * seconds`` after
  1970-01-01T00:00:00Z (to the microsecond), so processes need no shared start time
  (``7m`` fires at whole multiples of 420 s since the epoch, not on the hour). Intervals
  ignore DST: every hour is 3600 s.
- ``between(after, until, limit)`` is the sweeper's question: the slots in
  ``(after, until]``, the newest ``limit`` of them, oldest first, in O(limit).
"""

from __future__ import annotations

import abc
import bisect
import calendar
import dataclasses
import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery_durable.core.validate import DURATION_FORMS, duration_seconds, show
from celery_durable.errors import InvalidArgument

UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_TICK = dt.timedelta(microseconds=1)
_SECOND = dt.timedelta(seconds=1)
_ZERO, _LAST = dt.timedelta(0), dt.timedelta(hours=23, minutes=59, seconds=59)
# What running past the hour, the minute or the second of a day carries into.
_CARRY = (dt.timedelta(days=1), dt.timedelta(hours=1), dt.timedelta(minutes=1))
# The Gregorian calendar repeats every 400 years: a cron that matches no day in 401 never will.
_YEARS = 401
_MONTHS = {
    name: i + 1 for i, name in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())
}
_WEEKDAYS = {name: i for i, name in enumerate("SUN MON TUE WED THU FRI SAT".split())}
_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# (name, lowest, highest, names it takes); the optional seconds field comes first.
_FIELDS: tuple[tuple[str, int, int, dict[str, int] | None], ...] = (
    ("second", 0, 59, None),
    ("minute", 0, 59, None),
    ("hour", 0, 23, None),
    ("day-of-month", 1, 31, None),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _WEEKDAYS),
)


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


def slot_text(slot: dt.datetime) -> str:
    """A slot in UTC ISO 8601 (``2026-03-29T01:30:00Z``): the same text in every process."""
    return _utc(slot, "slot").isoformat().replace("+00:00", "Z")


def _utc(moment: dt.datetime, argument: str) -> dt.datetime:
    if not isinstance(moment, dt.datetime) or moment.utcoffset() is None:
        raise InvalidArgument(f"{argument}={show(moment)} must be an aware datetime")
    return moment.astimezone(UTC)


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"limit={show(limit)} must be an int of at least 1")


class Schedule(abc.ABC):
    """What the sweeper asks of a schedule: its slots around a moment."""

    @abc.abstractmethod
    def next_after(self, moment: dt.datetime) -> dt.datetime:
        """The first slot strictly after ``moment``, in UTC."""

    @abc.abstractmethod
    def previous_at_or_before(self, moment: dt.datetime) -> dt.datetime | None:
        """The last slot at or before ``moment``, in UTC; None if there is none."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The schedule for people: ``"cron '0 2 * * *' in Europe/Paris"``, ``"every 15m"``."""

    def between(self, after: dt.datetime, until: dt.datetime, limit: int) -> list[dt.datetime]:
        """The slots s with ``after < s <= until``, oldest first, but only the NEWEST
        ``limit`` of them: ``limit=1`` is catch-up "latest", a large limit "all" with a cap.
        It costs O(limit), however long the window."""
        _check_limit(limit)
        start, slot = _utc(after, "after"), self.previous_at_or_before(_utc(until, "until"))
        found: list[dt.datetime] = []
        while slot is not None and slot > start and len(found) < limit:
            found.append(slot)
            slot = self.previous_at_or_before(slot - _TICK)
        found.reverse()
        return found


def _interval_micros(every: object, argument: str) -> int:
    seconds = duration_seconds(every)
    if seconds is None:
        raise InvalidArgument(f"{argument}={show(every)} is not a duration: write {DURATION_FORMS}")
    micros = round(seconds * 1_000_000)
    if micros < 1:
        raise InvalidArgument(
            f"{argument}={show(every)} must be more than 0 (1 microsecond at least)"
        )
    return micros


@dataclasses.dataclass(frozen=True)
class Interval(Schedule):
    """Every ``seconds`` (a fraction too, to the microsecond), anchored at the Unix epoch."""

    seconds: float
    _micros: int = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        micros = _interval_micros(self.seconds, "Interval(seconds)")
        object.__setattr__(self, "_micros", micros)
        object.__setattr__(self, "seconds", micros / 1_000_000)

    @classmethod
    def parse(cls, every: object, argument: str = "every") -> Interval:
        """From a ``timedelta``, a number of seconds, or a duration (``"15m"``, ``"500ms"``)."""
        return cls(_interval_micros(every, argument) / 1_000_000)

    def _index(self, moment: dt.datetime, argument: str) -> int:
        """The number of whole intervals from the epoch to ``moment``."""
        return ((_utc(moment, argument) - _EPOCH) // _TICK) // self._micros

    def _slot(self, index: int) -> dt.datetime:
        return _EPOCH + dt.timedelta(microseconds=index * self._micros)

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        return self._slot(self._index(moment, "moment") + 1)

    def previous_at_or_before(self, moment: dt.datetime) -> dt.datetime | None:
        try:
            return self._slot(self._index(moment, "moment"))
        except OverflowError:  # before year 1
            return None

    def between(self, after: dt.datetime, until: dt.datetime, limit: int) -> list[dt.datetime]:
        _check_limit(limit)
        first, last = self._index(after, "after") + 1, self._index(until, "until")
        return [self._slot(k) for k in range(max(first, last - limit + 1), last + 1)]

    def describe(self) -> str:
        for unit, size in (("w", 604_800), ("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
            if self._micros % (size * 1_000_000) == 0:
                return f"every {self._micros // (size * 1_000_000)}{unit}"
        if self._micros % 1000 == 0:
            return f"every {self._micros // 1000}ms"
        return f"every {self.seconds:g}s"


def _field(
    text: str, spec: tuple[str, int, int, dict[str, int] | None], argument: str, expression: str
) -> tuple[int, ...]:
    """The values one cron field lists, sorted, or InvalidArgument naming the field."""
    name, low, high, names = spec

    def fail(part: str, problem: str) -> InvalidArgument:
        where = f"{argument}={show(expression)}: {name} field {text!r}"
        return InvalidArgument(
            f"{where} {problem}" if part == text else f"{where}: {part!r} {problem}"
        )

    def number(part: str) -> int:
        if part.isascii() and part.isdigit():
            value = int(part)
        elif names is not None and part.upper() in names:
            return names[part.upper()]
        else:
            example = f" or a name such as {next(iter(names))}" if names else ""
            raise fail(part, f"is not a number{example}")
        if not low <= value <= high:
            raise fail(part, f"is out of range {low}-{high}")
        return value

    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise fail(text, "has an empty list item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()):
                raise fail(item, f"has the step {step_text!r}, which is not a number")
            step = int(step_text)
            if step == 0:
                raise fail(item, "has the step 0: write a step of 1 or more")
        if base == "*":
            first, last = low, high
        else:
            start, dash, end = base.partition("-")
            first = number(start)
            last = number(end) if dash else (high if slash else first)
            if last < first:
                raise fail(item, f"is a backwards range ({start} comes after {end})")
        values.update(range(first, last + 1, step))
    return tuple(sorted({v % 7 for v in values} if name == "day-of-week" else values))


def _at_or_after(values: tuple[int, ...], value: int) -> int | None:
    i = bisect.bisect_left(values, value)
    return values[i] if i < len(values) else None


def _at_or_before(values: tuple[int, ...], value: int) -> int | None:
    i = bisect.bisect_right(values, value)
    return values[i - 1] if i else None


@dataclasses.dataclass(frozen=True)
class Cron(Schedule):
    """A cron expression in a time zone; build it with :meth:`Cron.parse`."""

    expression: str
    tz: dt.tzinfo
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]  # 0 is Sunday
    either_day: bool  # both day fields restricted: a day matches if either does (Vixie)
    # The same values as sets, for the common case of a value that is allowed.
    _sets: tuple[frozenset[int], ...] = dataclasses.field(init=False, repr=False, compare=False)
    _clock: tuple[tuple[tuple[int, ...], frozenset[int]], ...] = dataclasses.field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        fields = (self.months, self.days, self.weekdays, self.hours, self.minutes, self.seconds)
        object.__setattr__(self, "_sets", tuple(map(frozenset, fields)))
        object.__setattr__(self, "_clock", tuple((v, frozenset(v)) for v in fields[3:]))

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
        if not isinstance(expression, str):
            raise InvalidArgument(f"{argument}={show(expression)} must be a str")
        text = expression.strip()
        if text.startswith("@"):
            if text.lower() not in _ALIASES:
                aliases = ", ".join(_ALIASES)
                raise InvalidArgument(
                    f"{argument}={show(expression)} is not a known alias: write one of "
                    f"{aliases}, or 5 fields"
                )
            text = _ALIASES[text.lower()]
        fields = text.split()
        if len(fields) == 5:
            fields.insert(0, "0")
        elif len(fields) != 6:
            raise InvalidArgument(
                f"{argument}={show(expression)} has {len(fields)} fields: write 5 (minute "
                "hour day-of-month month day-of-week), 6 with a leading seconds field, or "
                "an alias such as @daily"
            )
        second, minute, hour, day, month, weekday = (
            _field(f, spec, argument, expression) for f, spec in zip(fields, _FIELDS, strict=True)
        )
        either_day = not fields[3].startswith("*") and not fields[5].startswith("*")
        cron = cls(expression, zone_info, second, minute, hour, day, month, weekday, either_day)
        if cron._walk(dt.datetime(2000, 1, 1), forward=True) is None:
            raise InvalidArgument(
                f"{argument}={show(expression)} never fires: no date matches its "
                "day-of-month, month and day-of-week fields"
            )
        return cron

    def describe(self) -> str:
        return f"cron {self.expression!r} in {self.tz}"

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        slot = self._find(moment, forward=True)
        if slot is None:
            raise InvalidArgument(
                f"cron {self.expression!r} has no slot after {moment} (year 9999)"
            )
        return slot

    def previous_at_or_before(self, moment: dt.datetime) -> dt.datetime | None:
        return self._find(moment, forward=False)

    def _find(self, moment: dt.datetime, forward: bool) -> dt.datetime | None:
        """The first slot strictly after ``moment``, or the last at or before it."""
        now = _utc(moment, "moment")
        local = now.astimezone(self.tz)
        change, shift = self._fold(now, local)
        if shift:  # in the repeated hour, whose wall times fired the first time round
            start = self._wall(change + shift if forward else change - 1)
        else:
            start = local.replace(tzinfo=None, microsecond=0) + (_SECOND if forward else _ZERO)
        while (wall := self._walk(start, forward)) is not None:
            if (slot := self._slot(wall)) is not None:
                return slot
            change = self._gap(wall)  # the clock skips it: go on from the other side
            start = self._wall(change if forward else change - 1)
        return None

    # Wall time and UTC: gaps (spring-forward) and folds (fall-back).

    def _slot(self, wall: dt.datetime) -> dt.datetime | None:
        """The first UTC instant the clock shows ``wall``; None if the clock skips it."""
        slot = wall.replace(tzinfo=self.tz).astimezone(UTC)
        return slot if slot.astimezone(self.tz).replace(tzinfo=None) == wall else None

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
        shift, timestamp = (first - second) // _SECOND, (now - _EPOCH) // _SECOND
        return self._change(timestamp - shift, timestamp), shift

    def _gap(self, wall: dt.datetime) -> int:
        """For a wall time the clock skips: the second at which it jumped over it."""
        shifted = wall.replace(tzinfo=self.tz).astimezone(UTC)
        jump = (shifted.astimezone(self.tz).replace(tzinfo=None) - wall) // _SECOND
        timestamp = (shifted - _EPOCH) // _SECOND
        before, after = sorted((timestamp, timestamp - jump))
        return self._change(before, after)

    # Matching wall times a field at a time: months, then days, hours, minutes, seconds.

    def _day_matches(self, day: int, weekday: int) -> bool:
        in_month, in_week = day in self._sets[1], weekday in self._sets[2]
        return (in_month or in_week) if self.either_day else (in_month and in_week)

    def _day(self, t: dt.datetime, forward: bool) -> int | None:
        """The first matching day of ``t``'s month from ``t``'s day on (or the last up to
        it), if any."""
        weekday = t.isoweekday() % 7
        if self._day_matches(t.day, weekday):
            return t.day
        last = calendar.monthrange(t.year, t.month)[1]
        if len(self.weekdays) == 7 and not self.either_day:  # the day of the month alone
            found = (_at_or_after if forward else _at_or_before)(self.days, t.day)
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
                    month = pick(self.months, t.month)
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
