"""Schedules that fire every fixed interval, anchored at the Unix epoch: firing time k is
``k * seconds`` after 1970-01-01T00:00:00Z (to the microsecond), so processes need no
shared start time, and every hour is 3600 s (DST does not move them)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from celery_durable.core.validate import DURATION_FORMS, duration_seconds, show
from celery_durable.errors import InvalidArgument
from celery_durable.schedules.firing_times import EPOCH, TICK, Schedule, as_utc, check_limit


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
        return ((as_utc(moment, argument) - EPOCH) // TICK) // self._micros

    def _firing_time(self, index: int) -> dt.datetime:
        return EPOCH + dt.timedelta(microseconds=index * self._micros)

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        return self._firing_time(self._index(moment, "moment") + 1)

    def previous_at_or_before(self, moment: dt.datetime) -> dt.datetime | None:
        try:
            return self._firing_time(self._index(moment, "moment"))
        except OverflowError:  # before year 1
            return None

    def between(self, after: dt.datetime, until: dt.datetime, limit: int) -> list[dt.datetime]:
        check_limit(limit)
        first, last = self._index(after, "after") + 1, self._index(until, "until")
        return [self._firing_time(k) for k in range(max(first, last - limit + 1), last + 1)]

    def describe(self) -> str:
        for unit, size in (("w", 604_800), ("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
            if self._micros % (size * 1_000_000) == 0:
                return f"every {self._micros // (size * 1_000_000)}{unit}"
        if self._micros % 1000 == 0:
            return f"every {self._micros // 1000}ms"
        return f"every {self.seconds:g}s"
