"""What every periodic schedule answers (celery_durable/schedules/firing_times.py), asked of both
kinds: between()'s newest-``limit`` window, aware datetimes only, comparison by value;
and the zones and slot texts they share. Every moment is a fixed datetime: no clock."""

from __future__ import annotations

import ast
import datetime as dt
import inspect
from zoneinfo import ZoneInfo

import pytest

from celery_durable.errors import InvalidArgument
from celery_durable.schedules import cron, cron_syntax, interval
from celery_durable.schedules import firing_times as slots
from celery_durable.schedules.cron import Cron
from celery_durable.schedules.firing_times import Schedule, firing_text, zone
from celery_durable.schedules.interval import Interval
from tests.support.slots import PARIS, utc


def test_tz_none_is_utc_and_an_unknown_zone_is_refused_naming_it() -> None:
    assert zone(None) == ZoneInfo("UTC")
    assert zone("Europe/Paris") is PARIS
    for bad in ("Mars/Olympus", "", " Europe/Paris", "../../etc/passwd", 5):
        with pytest.raises(InvalidArgument, match=f"^tz={bad!r} is not a known IANA time zone"):
            zone(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="^schedule.tz='Nowhere' is not a known"):
        zone("Nowhere", "schedule.tz")


# between(): after < slot <= until, oldest first, the newest `limit`.


@pytest.mark.parametrize(
    "schedule", [Cron.parse("*/10 * * * * *"), Interval.parse("10s")], ids=lambda s: s.describe()
)
def test_between_returns_the_newest_limit_slots_oldest_first(schedule: Schedule) -> None:
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
def test_between_costs_the_limit_not_the_window(schedule: Schedule) -> None:
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
    assert firing_text(utc(2026, 3, 29, 1, 30)) == "2026-03-29T01:30:00Z"
    assert firing_text(dt.datetime(2026, 3, 29, 3, 30, tzinfo=PARIS)) == "2026-03-29T01:30:00Z"
    assert firing_text(utc(2026, 1, 1, 0, 0, 0, 500_000)) == "2026-01-01T00:00:00.500000Z"


def test_schedules_compare_and_hash_by_value() -> None:
    assert Cron.parse("0 2 * * *", tz=PARIS) == Cron.parse("0 2 * * *", tz="Europe/Paris")
    assert Cron.parse("0 2 * * *") != Cron.parse("0 2 * * *", tz=PARIS)
    assert len({Interval(60), Interval.parse("1m"), Interval.parse(dt.timedelta(seconds=60))}) == 1


def test_firing_time_arithmetic_imports_nothing_of_celery_durable_but_errors_and_validate() -> None:
    for module in (slots, cron_syntax, cron, interval):
        tree = ast.parse(inspect.getsource(module))
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        ours = {name for name in imported if name.startswith("celery_durable")}
        arithmetic = {
            f"celery_durable.schedules.{name}" for name in ("firing_times", "cron_syntax")
        }
        assert ours <= {"celery_durable.errors", "celery_durable.core.validate", *arithmetic}, (
            module.__name__
        )
