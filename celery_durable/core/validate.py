"""Checks of what callers hand over at the edges: run ids, keys, names, free text.

These values go to the database and the broker verbatim, so they must obey both:

- AMQP carries the task id (which is the run id) as ``correlation_id``, a *short
  string* of at most 255 **bytes**: 100 emoji are 100 characters but 400 bytes.
- Postgres ``text``/``varchar`` can't hold NUL, and ``varchar(255)`` counts characters.
- Both need UTF-8; a lone surrogate (``"\\udcff"``, e.g. from ``os.fsdecode``) has none.

Every check raises ``InvalidArgument`` (a ``ValueError``) naming
the argument, the value and the rule, before anything is written or published.

Example::

    from celery_durable.core import validate

    validate.check_run_id("order-42")            # returns "order-42"
    validate.check_run_id("😀" * 100)           # InvalidArgument: ... 400 bytes in UTF-8 ...
    validate.check_idempotency_key(None)         # None: no key is fine
    validate.check_signal_name("approval")       # returns "approval"
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from celery_durable.errors import InvalidArgument

# AMQP short strings (correlation_id, queue names) are at most 255 bytes.
MAX_ID_BYTES = 255
# varchar(255) columns count characters.
MAX_KEY_CHARS = 255
# Leaves room for the wait step's name ("celery_durable.signal:" + name) in varchar(255).
MAX_SIGNAL_NAME_CHARS = 200
_SHOWN_CHARS = 80


def show(value: Any) -> str:
    """``repr(value)``, clipped for long strings (surrogates and NUL come out escaped)."""
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"
    return repr(value)


def utf8_problem(text: str) -> str | None:
    """Why ``text`` can't be encoded as UTF-8 (a lone surrogate), or None if it can.

    ``str.isascii()`` is O(1) in CPython, so ASCII text, the common case, costs nothing.
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        return f"it contains the lone surrogate {bad!r}, which UTF-8 can't encode"
    return None


def check_text(
    value: Any,
    argument: str,
    *,
    max_chars: int | None = None,
    max_bytes: int | None = None,
    allow_empty: bool = True,
    allow_none: bool = False,
) -> Any:
    """Check one string argument; returns it unchanged.

    ``argument`` names it in the error (``"run_id"``, ``"cancel(reason)"``, ...).
    """
    if value is None and allow_none:
        return None
    rule = _broken_rule(value, max_chars, max_bytes, allow_empty)
    if rule is not None:
        raise InvalidArgument(f"{argument}={show(value)} is invalid: {rule}")
    return value


def _broken_rule(
    value: Any, max_chars: int | None, max_bytes: int | None, allow_empty: bool
) -> str | None:
    if not isinstance(value, str):
        return f"it must be a str, not {type(value).__name__}"
    if not value and not allow_empty:
        return "it must not be empty"
    if "\x00" in value:
        return "it contains a NUL character, which the database can't store"
    problem = utf8_problem(value)
    if problem is not None:
        return problem
    if max_chars is not None and len(value) > max_chars:
        return f"it is {len(value)} characters long, over the limit of {max_chars}"
    if max_bytes is not None:
        size = len(value) if value.isascii() else len(value.encode("utf-8"))
        if size > max_bytes:
            return f"it is {size} bytes in UTF-8, over the limit of {max_bytes}"
    return None


def check_run_id(value: Any, argument: str = "run_id") -> str:
    """A run id (also the Celery task id): a non-empty str of at most 255 bytes in
    UTF-8 (AMQP's correlation_id), without NUL or lone surrogates."""
    rule = _broken_rule(value, None, MAX_ID_BYTES, allow_empty=False)
    if rule is not None:
        raise InvalidArgument(
            f"{argument}={show(value)} is not a valid run id: {rule} (a run id is "
            f"a non-empty str of at most {MAX_ID_BYTES} bytes in UTF-8, without NUL; it is "
            "also the Celery task id, which AMQP limits to 255 bytes)"
        )
    return str(value)


def chosen_run_id(where: str, **names: str | None) -> str | None:
    """The run id given under any of its names (``run_id``; ``workflow_id``, its older
    name; Celery's ``task_id``), checked; None when none is given. Two different ids are
    an error naming both."""
    given = {
        name: check_run_id(value, f"{where}: {name}")
        for name, value in names.items()
        if value is not None
    }
    if len(set(given.values())) > 1:
        shown = " and ".join(f"{name}={value!r}" for name, value in given.items())
        raise InvalidArgument(f"{where}: {shown} differ; pass one of them")
    return next(iter(given.values()), None)


def id_problem(value: Any) -> str | None:
    """Why ``value`` can't be a run id (the rules of ``check_run_id``), or None:
    for ids that come off the broker, where raising is no answer."""
    return _broken_rule(value, None, MAX_ID_BYTES, allow_empty=False)


def arguments_problem(
    args: Any, kwargs: Any, expected: str, counts: range, keywords: frozenset[str] = frozenset()
) -> str | None:
    """Why a message's ``args``/``kwargs`` don't fit its task (``expected`` names the
    arguments, ``counts`` how many positional ones), or None."""
    unknown = sorted(map(repr, set(kwargs or {}) - keywords))
    if isinstance(args, list | tuple) and len(args) in counts and not unknown:
        return None
    given = f"{len(args)} argument(s)" if isinstance(args, list | tuple) else show(args)
    extra = f" and the keyword(s) {', '.join(unknown)}" if unknown else ""
    return f"it carries {given}{extra}, not {expected}"


def check_idempotency_key(value: Any, argument: str = "idempotency_key") -> str | None:
    """None, or a str of at most 255 characters without NUL or lone surrogates."""
    checked: str | None = check_text(value, argument, max_chars=MAX_KEY_CHARS, allow_none=True)
    return checked


def check_signal_name(value: Any, argument: str = "signal name") -> str:
    """A non-empty str of at most 200 characters without NUL or lone surrogates."""
    checked: str = check_text(value, argument, max_chars=MAX_SIGNAL_NAME_CHARS, allow_empty=False)
    return checked


def check_queue(value: Any, argument: str = "queue") -> str | None:
    """None, or a queue name: non-empty, at most 255 bytes (an AMQP short string)."""
    checked: str | None = check_text(
        value,
        argument,
        max_chars=MAX_KEY_CHARS,
        max_bytes=MAX_ID_BYTES,
        allow_empty=False,
        allow_none=True,
    )
    return checked


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
# A sign, a decimal number and an optional unit: no "inf" or "nan", which float() takes.
_DURATION = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*(ms|s|m|h|d|w)?")
DURATION_FORMS = (
    "a number of seconds, a timedelta, or a number and a unit: 250ms, 30s, 5m, 2h, 30d, 1w"
)


def duration_seconds(value: Any) -> float | None:
    """Seconds in ``value`` (a number, a ``timedelta``, ``"30s"``, ``"1.5m"``...), negative
    ones included, or None when it is none of these forms or not finite.

    The one parser of every duration: settings, ``gc(older_than)``, ``--since``.
    """
    seconds: float | None = None
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value.strip().lower())
        if match is not None:
            seconds = float(match[1]) * _UNITS[match[2] or "s"]
    if seconds is None or not math.isfinite(seconds):
        return None
    return seconds


def parse_duration(value: Any, argument: str) -> float:
    """Seconds from ``"90s"``, ``"15m"``, ``"2h"``, ``"30d"``, ``"1w"``, ``"250ms"``, a
    number of seconds, or a ``timedelta``; InvalidArgument naming ``argument`` otherwise
    (negative durations too).

    Example: ``parse_duration("2h", "--since")`` is 7200.0.
    """
    seconds = duration_seconds(value)
    if seconds is None or seconds < 0:
        raise InvalidArgument(f"{argument}={show(value)} is not a duration: write {DURATION_FORMS}")
    return seconds


def parse_moment(value: Any, argument: str, now: float) -> float:
    """A point in time as epoch seconds: a duration before ``now`` (``"2h"``, a
    ``timedelta``), an epoch number, a ``datetime`` or an ISO 8601 string (naive is UTC).

    Example: ``parse_moment("2h", "--since", now)`` is ``now - 7200``.
    """
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return moment.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip()[:1].isdigit() and "-" in value:
        try:
            return parse_moment(dt.datetime.fromisoformat(value.strip()), argument, now)
        except ValueError:
            raise InvalidArgument(
                f"{argument}={show(value)} is not an ISO 8601 time (2026-12-01T10:00:00)"
            ) from None
    try:
        return now - parse_duration(value, argument)
    except InvalidArgument:
        raise InvalidArgument(
            f"{argument}={show(value)} is neither a duration ago (2h, 30d) nor an ISO 8601 "
            "time (2026-12-01T10:00:00)"
        ) from None
