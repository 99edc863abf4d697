"""Cron syntax: an expression's text (5 fields, 6 with a leading seconds field, or an
alias such as ``@daily``) as the sorted values each field allows, or InvalidArgument naming
the argument, the field and the part of it that is wrong. ``cron.Cron.parse`` documents
the syntax; what the values mean in time is ``cron``'s."""

from __future__ import annotations

from typing import NamedTuple

from celery_durable.core.validate import show
from celery_durable.errors import InvalidArgument

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


class CronFields(NamedTuple):
    """The values each field allows, sorted."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]  # 0 is Sunday
    either_day: bool  # both day fields restricted: a day matches if either does (Vixie)


def parse_fields(expression: str, argument: str) -> CronFields:
    """The fields of ``expression``, or InvalidArgument naming ``argument`` (``"cron"``)."""
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
    return CronFields(second, minute, hour, day, month, weekday, either_day)


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
