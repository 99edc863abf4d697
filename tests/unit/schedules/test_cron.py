"""Cron schedules (celery_durable/schedules/cron.py): what the fields mean in time (seconds,
the Vixie day rule, leap days, crons that never fire), the local wall time of a zone, and
DST: a skipped wall time doesn't fire, a repeated one fires once, at its first occurrence.
Every moment is a fixed datetime: no clock, no sleep."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from celery_durable.errors import InvalidArgument
from celery_durable.schedules.cron import Cron
from tests.support.slots import NEW_YORK, PARIS, UTC, utc, walk

LORD_HOWE = ZoneInfo("Australia/Lord_Howe")  # its clock moves by 30 minutes


def local(moments: list[dt.datetime], tz: ZoneInfo) -> list[str]:
    return [m.astimezone(tz).strftime("%m-%d %H:%M:%S%z") for m in moments]


# The fields in time.


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


@pytest.mark.parametrize("expression", ["0 0 31 2 *", "0 0 30,31 2 *", "0 0 31 4,6,9,11 *"])
def test_a_cron_no_date_matches_is_refused(expression: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        Cron.parse(expression)
    assert str(caught.value).startswith(f"cron={expression!r} never fires")


def test_the_error_names_the_argument_the_caller_gives() -> None:
    with pytest.raises(InvalidArgument, match=r"^schedule\(cron\)='61 \* \* \* \*': minute"):
        Cron.parse("61 * * * *", argument="schedule(cron)")
    with pytest.raises(InvalidArgument, match=r"^schedule\(cron\)='0 0 31 2 \*' never fires"):
        Cron.parse("0 0 31 2 *", argument="schedule(cron)")
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


def test_a_cron_is_in_utc_unless_given_a_zone_and_describes_itself_as_written() -> None:
    daily = Cron.parse("0 2 * * *")
    assert daily.tz == ZoneInfo("UTC")
    assert daily.next_after(utc(2026, 6, 1)) == utc(2026, 6, 1, 2)
    assert daily.describe() == "cron '0 2 * * *' in UTC"
    assert Cron.parse("@daily", tz=PARIS).describe() == "cron '@daily' in Europe/Paris"
    assert Cron.parse("0 2 * * *", tz="Europe/Paris").tz is PARIS
    assert Cron.parse("0 2 * * *", tz=UTC).next_after(utc(2026, 6, 1)) == utc(2026, 6, 1, 2)
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
        wall, fields = moment.astimezone(cron.tz), cron.fields
        in_month, in_week = wall.day in fields.days, wall.isoweekday() % 7 in fields.weekdays
        day = (in_month or in_week) if fields.either_day else (in_month and in_week)
        if (
            not wall.fold
            and day
            and wall.month in fields.months
            and wall.hour in fields.hours
            and wall.minute in fields.minutes
            and wall.second in fields.seconds
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
