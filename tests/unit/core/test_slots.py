"""The slots of periodic schedules (celery_durable/core/slots.py): cron syntax, the Vixie
day rule, DST (a skipped wall time doesn't fire, a repeated one fires once, at its first
occurrence), intervals anchored at the epoch, and between()'s newest-``limit`` window.
Every moment is a fixed datetime: no clock, no sleep."""

from __future__ import annotations

import ast
import datetime as dt
import inspect
from zoneinfo import ZoneInfo

import pytest

from celery_durable.core import slots
from celery_durable.core.slots import Cron, Interval, slot_text, zone
from celery_durable.errors import InvalidArgument

UTC = dt.timezone.utc
PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")  # its clock moves by 30 minutes


def utc(*fields: int) -> dt.datetime:
    return dt.datetime(*fields, tzinfo=UTC)


def walk(schedule: slots.Schedule, start: dt.datetime, count: int) -> list[dt.datetime]:
    """The ``count`` slots after ``start``, by next_after."""
    found = []
    for _ in range(count):
        start = schedule.next_after(start)
        found.append(start)
    return found


def local(moments: list[dt.datetime], tz: ZoneInfo) -> list[str]:
    return [m.astimezone(tz).strftime("%m-%d %H:%M:%S%z") for m in moments]


# Syntax.


@pytest.mark.parametrize(
    ("expression", "field", "values"),
    [
        ("* * * * *", "minutes", tuple(range(60))),
        ("* * * * *", "seconds", (0,)),
        ("5 * * * *", "minutes", (5,)),
        ("1-5 * * * *", "minutes", (1, 2, 3, 4, 5)),
        ("*/15 * * * *", "minutes", (0, 15, 30, 45)),
        ("10-30/10 * * * *", "minutes", (10, 20, 30)),
        ("5/20 * * * *", "minutes", (5, 25, 45)),
        ("1,15,30 * * * *", "minutes", (1, 15, 30)),
        ("0,*/20,7-8 * * * *", "minutes", (0, 7, 8, 20, 40)),
        ("0 */6 * * *", "hours", (0, 6, 12, 18)),
        ("0 0 1,15 * *", "days", (1, 15)),
        ("0 0 * JAN,jul,Dec *", "months", (1, 7, 12)),
        ("0 0 * mar-may *", "months", (3, 4, 5)),
        ("0 0 * */3 *", "months", (1, 4, 7, 10)),
        ("0 0 * * MON-FRI", "weekdays", (1, 2, 3, 4, 5)),
        ("0 0 * * sun", "weekdays", (0,)),
        ("0 0 * * 7", "weekdays", (0,)),
        ("0 0 * * 0,7", "weekdays", (0,)),
        ("0 0 * * 5-7", "weekdays", (0, 5, 6)),
        ("0 0 * * *", "weekdays", (0, 1, 2, 3, 4, 5, 6)),
        ("*/10 * * * * *", "seconds", (0, 10, 20, 30, 40, 50)),
        ("*/10 * * * * *", "minutes", tuple(range(60))),
        ("  30   0  12 * * *  ", "hours", (12,)),
    ],
)
def test_each_field_lists_the_values_its_syntax_names(
    expression: str, field: str, values: tuple[int, ...]
) -> None:
    assert getattr(Cron.parse(expression), field) == values


@pytest.mark.parametrize(
    ("alias", "expression"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_an_alias_is_its_five_fields(alias: str, expression: str) -> None:
    a, b = Cron.parse(alias, tz=PARIS), Cron.parse(expression, tz=PARIS)
    assert dataclass_fields(a) == dataclass_fields(b)
    assert a.describe() == f"cron {alias!r} in Europe/Paris"


def dataclass_fields(cron: Cron) -> tuple[object, ...]:
    return (cron.seconds, cron.minutes, cron.hours, cron.days, cron.months, cron.weekdays)


def test_a_sixth_field_is_a_leading_seconds_field() -> None:
    every_ten = Cron.parse("*/10 * * * * *")
    assert walk(every_ten, utc(2026, 1, 1, 0, 0, 5), 3) == [
        utc(2026, 1, 1, 0, 0, 10),
        utc(2026, 1, 1, 0, 0, 20),
        utc(2026, 1, 1, 0, 0, 30),
    ]
    assert Cron.parse("30 0 12 * * *").next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 12, 0, 30)
    # Sub-second moments: strictly after, at or before.
    assert every_ten.next_after(utc(2026, 1, 1, 0, 0, 10, 1)) == utc(2026, 1, 1, 0, 0, 20)
    assert every_ten.previous_at_or_before(utc(2026, 1, 1, 0, 0, 19, 999999)) == utc(
        2026, 1, 1, 0, 0, 10
    )


def test_both_day_fields_restricted_means_either_day_vixie() -> None:
    january = (utc(2025, 12, 31, 12), utc(2026, 1, 31, 23))
    thirteenth_or_friday = Cron.parse("0 0 13 * FRI").between(*january, limit=100)
    assert [s.day for s in thirteenth_or_friday] == [2, 9, 13, 16, 23, 30]
    assert [s.day for s in Cron.parse("0 0 13 * *").between(*january, limit=100)] == [13]
    assert [s.day for s in Cron.parse("0 0 * * FRI").between(*january, limit=100)] == [
        2,
        9,
        16,
        23,
        30,
    ]
    # A field starting with * is unrestricted (Vixie): */2 and MON are ANDed.
    odd_mondays = Cron.parse("0 0 */2 * MON").between(*january, limit=100)
    assert [s.day for s in odd_mondays] == [5, 19]
    assert [s.day for s in Cron.parse("0 0 1-7 * MON").between(*january, limit=100)] == [
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        12,
        19,
        26,
    ]


# Bad input: InvalidArgument naming the argument, the field and the value.


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", "cron='61 * * * *': minute field '61' is out of range 0-59"),
        ("1-61 * * * *", "cron='1-61 * * * *': minute field '1-61': '61' is out of range 0-59"),
        ("60 * * * * *", "second field '60' is out of range 0-59"),
        ("* 24 * * *", "hour field '24' is out of range 0-23"),
        ("* * 0 * *", "day-of-month field '0' is out of range 1-31"),
        ("* * 32 * *", "day-of-month field '32' is out of range 1-31"),
        ("* * * 13 *", "month field '13' is out of range 1-12"),
        ("* * * 0 *", "month field '0' is out of range 1-12"),
        ("* * * * 8", "day-of-week field '8' is out of range 0-7"),
        ("1,,2 * * * *", "minute field '1,,2' has an empty list item"),
        ("1, * * * *", "minute field '1,' has an empty list item"),
        ("*/0 * * * *", "minute field '*/0' has the step 0"),
        ("1-5/0 * * * *", "minute field '1-5/0' has the step 0"),
        ("*/x * * * *", "minute field '*/x' has the step 'x', which is not a number"),
        ("*/ * * * *", "minute field '*/' has the step '', which is not a number"),
        ("a * * * *", "minute field 'a' is not a number"),
        ("-1 * * * *", "minute field '-1': '' is not a number"),
        ("* * JAN * *", "day-of-month field 'JAN' is not a number"),
        ("* * * FOO *", "month field 'FOO' is not a number or a name such as JAN"),
        ("* * * * MON-FOO", "day-of-week field 'MON-FOO': 'FOO' is not a number or a name"),
        ("5-2 * * * *", "minute field '5-2' is a backwards range (5 comes after 2)"),
        ("* * * * FRI-MON", "day-of-week field 'FRI-MON' is a backwards range"),
        ("* * * *", "cron='* * * *' has 4 fields: write 5 (minute hour"),
        ("* * * * * * *", "has 7 fields"),
        ("", "cron='' has 0 fields"),
        ("@often", "cron='@often' is not a known alias: write one of @yearly"),
        ("@reboot", "is not a known alias"),
        ("0 0 31 2 *", "cron='0 0 31 2 *' never fires"),
        ("0 0 30,31 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
    ],
)
def test_a_bad_cron_is_refused_naming_the_field_and_value(expression: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        Cron.parse(expression)
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_the_error_names_the_argument_the_caller_gives() -> None:
    with pytest.raises(InvalidArgument, match=r"^schedule\(cron\)='61 \* \* \* \*': minute"):
        Cron.parse("61 * * * *", argument="schedule(cron)")
    with pytest.raises(InvalidArgument, match="^cron=5 must be a str"):
        Cron.parse(5)  # type: ignore[arg-type]


def test_a_never_firing_cron_is_refused_quickly_but_feb_29_is_not() -> None:
    # 31 February is found impossible by a search of a whole 400-year calendar cycle.
    leap_day = Cron.parse("0 0 29 2 *")
    assert walk(leap_day, utc(2026, 1, 1), 2) == [utc(2028, 2, 29), utc(2032, 2, 29)]
    # 2100 is no leap year: 8 years from 2096 to 2104.
    assert leap_day.next_after(utc(2096, 3, 1)) == utc(2104, 2, 29)
    assert leap_day.previous_at_or_before(utc(2104, 2, 28)) == utc(2096, 2, 29)
    # Rare, but possible: the 1st or 31st AND a Monday (*/30 is unrestricted), in May.
    assert Cron.parse("0 0 */30 5 MON").next_after(utc(2026, 1, 1)) == utc(2027, 5, 31)


# Time zones and DST.


def test_tz_none_is_utc_and_an_unknown_zone_is_refused_naming_it() -> None:
    assert zone(None) == ZoneInfo("UTC")
    assert zone("Europe/Paris") is PARIS
    daily = Cron.parse("0 2 * * *")
    assert daily.tz == ZoneInfo("UTC")
    assert daily.next_after(utc(2026, 6, 1)) == utc(2026, 6, 1, 2)
    assert daily.describe() == "cron '0 2 * * *' in UTC"
    assert Cron.parse("0 2 * * *", tz="Europe/Paris").tz is PARIS
    assert Cron.parse("0 2 * * *", tz=UTC).next_after(utc(2026, 6, 1)) == utc(2026, 6, 1, 2)
    for bad in ("Mars/Olympus", "", " Europe/Paris", "../../etc/passwd", 5):
        with pytest.raises(InvalidArgument, match=f"^tz={bad!r} is not a known IANA time zone"):
            zone(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="^schedule.tz='Nowhere' is not a known"):
        zone("Nowhere", "schedule.tz")
    with pytest.raises(InvalidArgument, match="^tz='Nowhere' is not a known"):
        Cron.parse("0 2 * * *", tz="Nowhere")


def test_cron_is_local_wall_time_and_slots_come_out_in_utc() -> None:
    daily = Cron.parse("0 2 * * *", tz=PARIS)
    assert daily.describe() == "cron '0 2 * * *' in Europe/Paris"
    slot = daily.next_after(dt.datetime(2026, 1, 10, 12, tzinfo=NEW_YORK))
    assert slot == utc(2026, 1, 11, 1) and slot.tzinfo is UTC  # 02:00 CET
    assert daily.next_after(utc(2026, 7, 10, 12)) == utc(2026, 7, 11, 0)  # 02:00 CEST


def test_paris_spring_forward_skips_the_wall_times_that_do_not_exist() -> None:
    # 2026-03-29 02:00 CET the clock jumps to 03:00 CEST: 02:30 doesn't exist that day.
    daily = Cron.parse("30 2 * * *", tz=PARIS)
    assert daily.between(utc(2026, 3, 26, 12), utc(2026, 3, 31, 12), limit=10) == [
        utc(2026, 3, 27, 1, 30),
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 30, 0, 30),  # not shifted to 03:30 on the 29th
        utc(2026, 3, 31, 0, 30),
    ]
    hourly = Cron.parse("0 * * * *", tz=PARIS)
    slots_ = hourly.between(utc(2026, 3, 28, 22), utc(2026, 3, 29, 3), limit=10)
    assert local(slots_, PARIS) == [
        "03-29 00:00:00+0100",
        "03-29 01:00:00+0100",
        "03-29 03:00:00+0200",  # no 02:00
        "03-29 04:00:00+0200",
        "03-29 05:00:00+0200",
    ]
    assert slots_[1:3] == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1)]  # one hour apart
    minutely = Cron.parse("* * * * *", tz=PARIS)
    assert minutely.next_after(utc(2026, 3, 29, 0, 59)) == utc(2026, 3, 29, 1)  # 01:59 -> 03:00
    assert minutely.previous_at_or_before(utc(2026, 3, 29, 1, 0, 30)) == utc(2026, 3, 29, 1)
    assert minutely.previous_at_or_before(utc(2026, 3, 29, 0, 59, 59)) == utc(2026, 3, 29, 0, 59)


def test_paris_fall_back_fires_a_repeated_wall_time_once_at_its_first_occurrence() -> None:
    # 2026-10-25 03:00 CEST the clock goes back to 02:00 CET: 02:00-02:59 happens twice.
    daily = Cron.parse("30 2 * * *", tz=PARIS)
    assert daily.between(utc(2026, 10, 23, 12), utc(2026, 10, 26, 12), limit=10) == [
        utc(2026, 10, 24, 0, 30),
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST; not again at 01:30 UTC (02:30 CET)
        utc(2026, 10, 26, 1, 30),
    ]
    hourly = Cron.parse("0 * * * *", tz=PARIS)
    slots_ = hourly.between(utc(2026, 10, 24, 22), utc(2026, 10, 25, 4), limit=10)
    assert local(slots_, PARIS) == [
        "10-25 01:00:00+0200",
        "10-25 02:00:00+0200",  # fires once: not at 02:00+0100
        "10-25 03:00:00+0100",
        "10-25 04:00:00+0100",
        "10-25 05:00:00+0100",
    ]
    assert slots_[1:3] == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 2)]  # two hours apart
    # Asked from inside the repeated hour (02:10 CET), both ways.
    inside = utc(2026, 10, 25, 1, 10)
    assert hourly.next_after(inside) == utc(2026, 10, 25, 2)
    assert hourly.previous_at_or_before(inside) == utc(2026, 10, 25, 0)
    quarterly = Cron.parse("*/15 * * * *", tz=PARIS)
    assert quarterly.next_after(inside) == utc(2026, 10, 25, 2)
    assert quarterly.previous_at_or_before(inside) == utc(2026, 10, 25, 0, 45)
    assert quarterly.between(utc(2026, 10, 25, 0, 40), utc(2026, 10, 25, 2, 5), limit=10) == [
        utc(2026, 10, 25, 0, 45),
        utc(2026, 10, 25, 2),  # the repeated hour is silent
    ]


def test_new_york_skips_and_repeats_its_own_hours() -> None:
    # 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
    daily = Cron.parse("30 2 * * *", tz=NEW_YORK)
    assert daily.between(utc(2026, 3, 7), utc(2026, 3, 10), limit=10) == [
        utc(2026, 3, 7, 7, 30),
        utc(2026, 3, 9, 6, 30),
    ]
    repeated = Cron.parse("30 1 * * *", tz=NEW_YORK)
    assert repeated.between(utc(2026, 10, 31), utc(2026, 11, 3), limit=10) == [
        utc(2026, 10, 31, 5, 30),
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT, and not 01:30 EST (06:30 UTC)
        utc(2026, 11, 2, 6, 30),
    ]
    hourly = Cron.parse("0 * * * *", tz=NEW_YORK)
    assert local(hourly.between(utc(2026, 11, 1, 4), utc(2026, 11, 1, 8), limit=10), NEW_YORK) == [
        "11-01 01:00:00-0400",
        "11-01 02:00:00-0500",
        "11-01 03:00:00-0500",
    ]


def brute_force(cron: Cron, start: dt.datetime, end: dt.datetime, step: int) -> list[dt.datetime]:
    """Every ``step`` seconds from ``start`` to ``end``: those whose wall time matches,
    at their first occurrence (the definition, checked the slow way)."""
    found = []
    moment = start
    while moment <= end:
        wall = moment.astimezone(cron.tz)
        in_month, in_week = wall.day in cron.days, wall.isoweekday() % 7 in cron.weekdays
        day = (in_month or in_week) if cron.either_day else (in_month and in_week)
        if (
            not wall.fold
            and day
            and wall.month in cron.months
            and wall.hour in cron.hours
            and wall.minute in cron.minutes
            and wall.second in cron.seconds
        ):
            found.append(moment)
        moment += dt.timedelta(seconds=step)
    return found


@pytest.mark.parametrize("tz", [PARIS, NEW_YORK, LORD_HOWE, ZoneInfo("UTC")], ids=str)
@pytest.mark.parametrize(
    "expression", ["* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "15,45 1-3 * * *"]
)
@pytest.mark.parametrize("season", ["spring", "autumn"])
def test_slots_match_a_minute_by_minute_search_around_dst(
    tz: ZoneInfo, expression: str, season: str
) -> None:
    # Two days around each 2026 change of all three zones (Lord Howe's is 30 minutes).
    days = {
        ("Europe/Paris", "spring"): (3, 28),
        ("Europe/Paris", "autumn"): (10, 24),
        ("America/New_York", "spring"): (3, 7),
        ("America/New_York", "autumn"): (10, 31),
        ("Australia/Lord_Howe", "spring"): (10, 3),
        ("Australia/Lord_Howe", "autumn"): (4, 4),
    }.get((str(tz), season), (3, 28))
    start = utc(2026, *days, 0)
    end = start + dt.timedelta(days=2)
    cron = Cron.parse(expression, tz=tz)
    known = brute_force(cron, start - dt.timedelta(days=1), end + dt.timedelta(days=1), 60)
    expected = [s for s in known if start <= s <= end]
    assert cron.between(start - dt.timedelta(microseconds=1), end, limit=10_000) == expected
    assert walk(cron, start - dt.timedelta(seconds=1), len(expected)) == expected
    # Asked at odd moments, inside repeated and around skipped hours too.
    moment = start
    while moment < end:
        assert cron.next_after(moment) == next(s for s in known if s > moment), moment
        before = [s for s in known if s <= moment][-1]
        assert cron.previous_at_or_before(moment) == before, moment
        moment += dt.timedelta(minutes=13, seconds=17, microseconds=5)


def test_a_seconds_cron_matches_a_second_by_second_search_at_fall_back() -> None:
    cron = Cron.parse("*/20 59 0-3 * * *", tz=PARIS)
    start, end = utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 3, 30)
    expected = brute_force(cron, start, end, 1)
    assert len(expected) == 9  # 00:59, 01:59 CEST and 03:59 CET (not 02:59 CET), x3
    assert cron.between(start, end, limit=100) == expected


# Intervals.


@pytest.mark.parametrize(
    ("every", "seconds", "text"),
    [
        (1, 1.0, "every 1s"),
        (0.5, 0.5, "every 500ms"),
        ("500ms", 0.5, "every 500ms"),
        ("15m", 900.0, "every 15m"),
        (dt.timedelta(minutes=15), 900.0, "every 15m"),
        (90, 90.0, "every 90s"),
        ("2h", 7200.0, "every 2h"),
        ("1d", 86400.0, "every 1d"),
        ("1w", 604800.0, "every 1w"),
        (1.5, 1.5, "every 1500ms"),
        (0.000003, 0.000003, "every 3e-06s"),
    ],
)
def test_an_interval_takes_seconds_timedeltas_and_durations(
    every: object, seconds: float, text: str
) -> None:
    interval = Interval.parse(every)
    assert interval.seconds == seconds
    assert interval.describe() == text
    assert interval == Interval(seconds)


@pytest.mark.parametrize("every", [0, -1, "0s", "-5m", "soon", None, True, float("inf"), 1e-9])
def test_a_bad_interval_is_refused_naming_the_argument(every: object) -> None:
    with pytest.raises(InvalidArgument, match=f"^every={every!r}"):
        Interval.parse(every)
    with pytest.raises(InvalidArgument, match=rf"^schedule\(every\)={every!r}"):
        Interval.parse(every, argument="schedule(every)")
    with pytest.raises(InvalidArgument, match=r"^Interval\(seconds\)="):
        Interval(every)  # type: ignore[arg-type]


def test_interval_slots_are_anchored_at_the_epoch_in_utc() -> None:
    seven_minutes = Interval.parse("7m")
    slot = seven_minutes.next_after(utc(2026, 1, 1))
    assert (slot - utc(1970, 1, 1)).total_seconds() % 420 == 0
    assert utc(2026, 1, 1) < slot <= utc(2026, 1, 1, 0, 7) and slot.tzinfo is UTC
    assert seven_minutes.previous_at_or_before(slot) == slot
    assert seven_minutes.next_after(slot) == slot + dt.timedelta(minutes=7)
    quarter = Interval.parse("15m")
    assert quarter.next_after(utc(2026, 1, 1, 10, 7)) == utc(2026, 1, 1, 10, 15)
    assert quarter.next_after(utc(2026, 1, 1, 10, 15)) == utc(2026, 1, 1, 10, 30)
    assert quarter.previous_at_or_before(utc(2026, 1, 1, 10, 14, 59)) == utc(2026, 1, 1, 10)
    half = Interval(0.5)
    assert walk(half, utc(2026, 1, 1, 0, 0, 0, 100), 3) == [
        utc(2026, 1, 1, 0, 0, 0, 500_000),
        utc(2026, 1, 1, 0, 0, 1),
        utc(2026, 1, 1, 0, 0, 1, 500_000),
    ]
    second = Interval.parse(1)
    assert second.next_after(dt.datetime(2026, 1, 1, 1, 0, 0, 1, tzinfo=PARIS)) == utc(
        2026, 1, 1, 0, 0, 1
    )


def test_intervals_ignore_dst() -> None:
    hourly = Interval.parse("1h")
    # 2026-10-25 in Paris lasts 25 hours: 25 slots, an hour apart in UTC.
    day = hourly.between(
        dt.datetime(2026, 10, 25, tzinfo=PARIS) - dt.timedelta(microseconds=1),
        dt.datetime(2026, 10, 26, tzinfo=PARIS) - dt.timedelta(microseconds=1),
        limit=100,
    )
    assert len(day) == 25
    assert {b - a for a, b in zip(day, day[1:], strict=False)} == {dt.timedelta(hours=1)}


# between(): after < slot <= until, oldest first, the newest `limit`.


@pytest.mark.parametrize(
    "schedule", [Cron.parse("*/10 * * * * *"), Interval.parse("10s")], ids=lambda s: s.describe()
)
def test_between_returns_the_newest_limit_slots_oldest_first(schedule: slots.Schedule) -> None:
    after, until = utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 0, 1)
    everything = schedule.between(after, until, limit=100)
    assert everything == [utc(2026, 1, 1, 0, 0, s) for s in (10, 20, 30, 40, 50)] + [until]
    assert schedule.between(after, until, limit=3) == everything[-3:]
    assert schedule.between(after, until, limit=1) == [until]  # catch-up "latest"
    assert schedule.between(after, utc(2026, 1, 1, 0, 0, 9), limit=5) == []
    assert schedule.between(until, after, limit=5) == []
    assert schedule.between(after, after, limit=5) == []
    for limit in (0, -1, 1.5, True, None):
        with pytest.raises(InvalidArgument, match=f"^limit={limit!r} must be an int"):
            schedule.between(after, until, limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "schedule", [Cron.parse("* * * * * *"), Interval.parse(1)], ids=lambda s: s.describe()
)
def test_between_costs_the_limit_not_the_window(schedule: slots.Schedule) -> None:
    # A year of every-second slots (31 million): only the 10 newest are computed.
    found = schedule.between(utc(2025, 1, 1), utc(2026, 1, 1), limit=10)
    assert found == [utc(2025, 12, 31, 23, 59, 51 + s) for s in range(9)] + [utc(2026, 1, 1)]


def test_aware_datetimes_only() -> None:
    for schedule in (Cron.parse("@daily"), Interval.parse(60)):
        with pytest.raises(InvalidArgument, match="^moment=datetime.datetime.*aware datetime"):
            schedule.next_after(dt.datetime(2026, 1, 1))
        with pytest.raises(InvalidArgument, match="^after=.*aware datetime"):
            schedule.between(dt.datetime(2026, 1, 1), utc(2026, 1, 2), limit=1)


def test_slot_text_is_utc_iso_8601() -> None:
    assert slot_text(utc(2026, 3, 29, 1, 30)) == "2026-03-29T01:30:00Z"
    assert slot_text(dt.datetime(2026, 3, 29, 3, 30, tzinfo=PARIS)) == "2026-03-29T01:30:00Z"
    assert slot_text(utc(2026, 1, 1, 0, 0, 0, 500_000)) == "2026-01-01T00:00:00.500000Z"


def test_schedules_compare_and_hash_by_value() -> None:
    assert Cron.parse("0 2 * * *", tz=PARIS) == Cron.parse("0 2 * * *", tz="Europe/Paris")
    assert Cron.parse("0 2 * * *") != Cron.parse("0 2 * * *", tz=PARIS)
    assert len({Interval(60), Interval.parse("1m"), Interval.parse(dt.timedelta(seconds=60))}) == 1


def test_core_imports_nothing_of_celery_durable_but_errors_and_core() -> None:
    tree = ast.parse(inspect.getsource(slots))
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    ours = {name for name in imported if name.startswith("celery_durable")}
    assert ours <= {"celery_durable.errors", "celery_durable.core.validate"}
