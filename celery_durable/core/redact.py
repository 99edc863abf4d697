"""``durable_redact``: mask secrets in the inputs and outputs that people are shown.

The setting is a list of JSON keys (matched case-insensitively, at any depth) or a
callable that takes a decoded value and returns what to show. The dashboard applies it on
every page, ``celery -A app durable show --json`` to what it prints and the worker to
Celery's "Task ... succeeded" line; the store keeps the real values.

``mask_urls`` masks the passwords of database and broker URLs in any text (an error
message, a log line).

Example::

    app.conf.durable_redact = ["password", "card_number"]
    # or: app.conf.durable_redact = lambda value: my_scrubber(value)
    redactor_of(app.conf.get("durable_redact"))({"user": "al", "password": "x"})
    # -> {"user": "al", "password": "***"}
    mask_urls("bad url postgres://al:pw@db/x?sslpassword=k")
    # -> "bad url postgres://al:***@db/x?sslpassword=***"
"""

from __future__ import annotations

import re
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


# ``scheme://user:password@``, even in a URL that does not parse: everything from the
# user's colon to the last ``@`` before a space or quote is the password.
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@'\"]*:)[^\s'\"]*(?=@)")
# ``password=``, ``sslpassword=``, ``secret=``... in a query string or a libpq conninfo.
_SECRET_PARAMETER = re.compile(
    r"(?i)(\b\w*(?:password|passwd|secret|token)\w*\s*=\s*)('[^']*'|[^\s&;'\",)]+)"
)


def mask_urls(text: str) -> str:
    """``text`` with the password of each URL in it, and each secret parameter
    (``password=``, ``sslpassword=``, ...), shown as ``***``."""
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK, text)
    return _SECRET_PARAMETER.sub(lambda m: m.group(1) + MASK, text)
