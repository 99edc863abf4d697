"""Interval schedules (celery_durable/schedules/interval.py): what they take, slots anchored
at the epoch in UTC, and DST ignored. Every moment is a fixed datetime: no clock, no sleep."""

from __future__ import annotations

import datetime as dt

import pytest

from celery_durable.errors import InvalidArgument
from celery_durable.schedules.interval import Interval
from tests.support.slots import PARIS, UTC, utc, walk


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
