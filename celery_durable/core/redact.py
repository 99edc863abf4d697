"""``durable_redact``: mask secrets in the inputs and outputs that people are shown.

The setting is a list of JSON keys (matched case-insensitively, at any depth) or a
callable that takes a decoded value and returns what to show. The dashboard applies it on
every page and ``celery -A app durable show --json`` to what it prints; the store keeps the
real values.

Example::

    app.conf.durable_redact = ["password", "card_number"]
    # or: app.conf.durable_redact = lambda value: my_scrubber(value)
    redactor_of(app.conf.get("durable_redact"))({"user": "al", "password": "x"})
    # -> {"user": "al", "password": "***"}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from celery_durable.errors import ConfigurationError

MASK = "***"
Redactor = Callable[[Any], Any]


def _unchanged(value: Any) -> Any:
    return value


def redactor_of(setting: Any) -> Redactor:
    """The function that masks a decoded JSON value, from the ``durable_redact`` setting
    (None, a comma-separated string or list of keys, or a callable)."""
    if setting is None or setting == "" or setting == []:
        return _unchanged
    if callable(setting):
        return setting  # type: ignore[no-any-return]
    if isinstance(setting, str):
        setting = [key for key in setting.split(",") if key.strip()]
    if not isinstance(setting, Iterable) or not all(isinstance(k, str) for k in setting):
        raise ConfigurationError(
            f"durable_redact={setting!r} must be a list of JSON keys or a callable"
        )
    keys = frozenset(key.strip().lower() for key in setting)

    def mask(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: MASK if str(k).lower() in keys else mask(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [mask(v) for v in value]
        return value

    return mask
