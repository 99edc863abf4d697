"""Settings, read from ``Durable(...)`` keywords, ``CELERY_DURABLE_*`` env vars and ``app.conf``.

Precedence, highest first: keyword arguments, environment, Celery configuration, defaults.

Example::

    app.conf.durable_lock_timeout = "1m"        # or CELERY_DURABLE_LOCK_TIMEOUT=60
    durable = Durable(app, database_url="postgresql+psycopg://postgres@127.0.0.1/shop")
    durable.config.lock_timeout                 # 60.0
    durable.config.validate()                   # refuses what was given out of range

Every duration setting takes the same forms (validate.duration_seconds). A number out of
range is clamped with a warning, so a worker still starts; validate() judges the value as it
was given and refuses it. A new setting is one Setting row (core/settings.py) and one
DurableConfig field.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from celery_durable.core.settings import SETTINGS, SETTINGS_BY_NAME, Setting
from celery_durable.core.validate import DURATION_FORMS, duration_seconds, show
from celery_durable.errors import ConfigurationError

logger = logging.getLogger("celery_durable.config")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,30}$")


@dataclasses.dataclass(frozen=True)
class Given:
    """A setting as one source gave it, kept so validate() judges it rather than the value
    from_sources clamped it to."""

    raw: Any
    value: Any  # parsed, not clamped
    used: Any  # what the config holds
    origin: str  # "Durable(x=...)", "CELERY_DURABLE_X" or "app.conf.durable_x"

    def where(self) -> str:
        """The source with the value it held: ``app.conf.durable_poll_interval=0``."""
        if self.origin.startswith("Durable("):
            return f"{self.origin.removesuffix('...)')}{show(self.raw)})"
        return f"{self.origin}={show(self.raw)}"


# Where a framework's own database settings give the store's URL when no source names one:
# each takes the alias (durable_database) and returns (url, where it came from), or None.
# celery_durable.contrib.django adds the one that reads DATABASES.
DatabaseUrlSource = Callable[[str], "tuple[str, str] | None"]
DATABASE_URL_SOURCES: list[DatabaseUrlSource] = []


def _url_of_framework(values: dict[str, Any], given: dict[str, Given]) -> None:
    for source in DATABASE_URL_SOURCES:
        found = source(values["database"])
        if found is not None:
            url, origin = found
            values["database_url"] = url
            given["database_url"] = Given(url, url, url, origin)
            return


@dataclasses.dataclass
class DurableConfig:
    """Validated settings of one ``Durable`` instance."""

    database_url: str = "sqlite:///celery_durable.sqlite3"
    database: str = "default"
    lock_timeout: float = 30.0
    poll_interval: float = 1.0
    max_attempts: int = 3
    retry_backoff: float = 5.0
    max_retry_backoff: float = 3600.0
    dispatch_grace: float = 60.0
    table_prefix: str = "durable_"
    namespace: str = "default"
    signal_queue: str = "celery_durable.signals"
    max_pending_signals: int = 100
    max_steps: int = 10_000
    max_child_depth: int = 32
    max_map_items: int = 100_000
    max_payload_bytes: int = 16 * 1024 * 1024
    max_payload_depth: int = 100
    max_recoveries: int = 10
    max_dispatches: int = 10
    sweep_batch: int = 500
    deferred_max_steps: int = 100
    deferred_max_age: float = 1.0
    pgbouncer: bool = False
    listen_url: str = ""
    retention: float = 0.0
    log_json: bool = False
    # What each source gave, by setting name (from_sources fills it).
    given: dict[str, Given] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_sources(
        cls,
        overrides: Mapping[str, Any] | None = None,
        app_conf: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> DurableConfig:
        """Merge the sources; out-of-range numbers are clamped with a warning (validate()
        refuses them)."""
        overrides = cls.check_keywords(overrides or {})
        environ = os.environ if environ is None else environ
        app_conf = app_conf or {}
        values: dict[str, Any] = {}
        given: dict[str, Given] = {}
        for setting in SETTINGS:
            env_name = f"CELERY_DURABLE_{setting.name.upper()}"
            conf_name = f"durable_{setting.name}"
            if overrides.get(setting.name) is not None:
                raw, origin = overrides[setting.name], f"Durable({setting.name}=...)"
            elif environ.get(env_name) not in (None, ""):
                raw, origin = environ[env_name], env_name
            elif app_conf.get(conf_name) is not None:
                raw, origin = app_conf[conf_name], f"app.conf.{conf_name}"
            else:
                values[setting.name] = setting.default
                continue
            value = _coerce(setting, raw, origin)
            used = values[setting.name] = _clamp(setting, value)
            given[setting.name] = Given(raw, value, used, origin)
            if used != value:
                logger.warning(
                    "%s is below the minimum of durable_%s, %s; using %s "
                    "(durable.config.validate() refuses it)",
                    given[setting.name].where(),
                    setting.name,
                    _allowed(setting),
                    _number(used),
                    extra={"setting": f"durable_{setting.name}"},
                )
        if "database_url" not in given:
            _url_of_framework(values, given)
        if not values["signal_queue"]:
            # Apps of two namespaces on one broker must not take each other's signals.
            values["signal_queue"] = default_signal_queue(values["namespace"])
        config = cls(**values)
        config.given.update(given)
        # Clamped values are what runs, so they are what can stop it from starting.
        problems = config._problems(as_given=False)
        if problems:
            raise ConfigurationError("; ".join(problems))
        return config

    @staticmethod
    def check_keywords(overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``Durable(...)`` keywords on their own: known names, right types.

        Cross-field rules (``lock_timeout`` > ``poll_interval``) wait for the merge: the
        other field may come from the environment or ``app.conf``.
        """
        unknown = set(overrides) - set(SETTINGS_BY_NAME)
        if unknown:
            raise ConfigurationError(
                f"unknown celery_durable setting(s): {', '.join(sorted(unknown))}; "
                f"known: {', '.join(SETTINGS_BY_NAME)}"
            )
        for name, raw in overrides.items():
            if raw is not None:
                _coerce(SETTINGS_BY_NAME[name], raw, f"Durable({name}=...)")
        return dict(overrides)

    def validate(self) -> DurableConfig:
        """Raise ``ConfigurationError`` naming every setting out of range, as it was
        given (not as from_sources clamped it), with its source and the allowed range."""
        problems = self._problems(as_given=True)
        if problems:
            raise ConfigurationError("; ".join(problems))
        return self

    def _problems(self, *, as_given: bool) -> list[str]:
        """What is wrong, one sentence each. ``as_given``: judge what the sources gave
        where from_sources clamped it; otherwise judge what the config holds."""
        values = {s.name: self._judged(s.name, as_given) for s in SETTINGS}
        problems: list[str] = []
        wrong: set[str] = set()
        for setting in SETTINGS:
            value = values[setting.name]
            problem = _type_problem(setting, value)
            if problem is not None:
                problems.append(f"durable_{setting.name} {problem}")
            elif setting.minimum is not None and value < setting.minimum:
                problems.append(
                    f"{self._shown(setting.name, as_given)} is out of range: it must be at "
                    f"least {_allowed(setting)}"
                )
            else:
                continue
            wrong.add(setting.name)
        if not _IDENTIFIER.match(self.table_prefix + "x"):
            problems.append(
                f"durable_table_prefix={self.table_prefix!r} must be letters, digits and "
                "underscores, start with a letter or underscore, at most 30 characters"
            )
        if not self.namespace or len(self.namespace) > 200:
            problems.append(f"durable_namespace={self.namespace!r} must be 1 to 200 characters")
        if not self.database_url:
            problems.append("durable_database_url is empty")
        if not wrong & {"lock_timeout", "poll_interval"} and (
            values["lock_timeout"] <= values["poll_interval"]
        ):
            problems.append(
                f"{self._shown('lock_timeout', as_given)} must exceed "
                f"{self._shown('poll_interval', as_given)}"
            )
        return problems

    def _source(self, name: str) -> Given | None:
        given = self.given.get(name)
        # Set in code after the merge: what is there now is what counts.
        return given if given is not None and given.used == getattr(self, name) else None

    def _judged(self, name: str, as_given: bool) -> Any:
        given = self._source(name)
        return given.value if given is not None and as_given else getattr(self, name)

    def _shown(self, name: str, as_given: bool) -> str:
        """``durable_x=<value given> (<source>=<as written>[, clamped to <used>])``."""
        given = self._source(name)
        if given is None:
            return f"durable_{name}={_number(getattr(self, name))}"
        clamped = ""
        if not as_given and given.used != given.value:
            clamped = f", clamped to {_number(given.used)}"
        return f"durable_{name}={_number(given.value)} ({given.where()}{clamped})"


def default_signal_queue(namespace: str) -> str:
    base = "celery_durable.signals"
    return base if namespace == "default" else f"{base}.{namespace}"


_BOOLS = {
    **dict.fromkeys(("1", "true", "yes", "on"), True),
    **dict.fromkeys(("0", "false", "no", "off"), False),
}


def _coerce(setting: Setting, raw: Any, origin: str) -> Any:
    if setting.kind is str:
        return str(raw)
    try:
        return _parse(setting, raw)
    except ValueError as exc:
        where = Given(raw, raw, raw, origin).where()
        what, *hint = exc.args
        raise ConfigurationError(
            f"{where} is not {what} for durable_{setting.name}{''.join(hint)}"
        ) from None


def _parse(setting: Setting, raw: Any) -> Any:
    """``raw`` as the setting's kind; ValueError(what it is not, [how to write it])."""
    if setting.kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _BOOLS:
            return _BOOLS[raw.strip().lower()]
        raise ValueError("a valid bool", " (use true/false, 1/0, yes/no or on/off)")
    if setting.duration:
        seconds = duration_seconds(raw)
        if seconds is None:
            raise ValueError("a valid duration", f": write {DURATION_FORMS}")
        return seconds
    if setting.kind is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if isinstance(raw, str) and raw.strip().lstrip("+-").isdigit():
            return int(raw.strip())
        raise ValueError("a whole number")
    if isinstance(raw, bool):  # float(True) is 1.0: a slip, not a number
        raise ValueError(f"a valid {setting.kind.__name__}")
    try:
        return setting.kind(raw)
    except (TypeError, ValueError):
        raise ValueError(f"a valid {setting.kind.__name__}") from None


def _clamp(setting: Setting, value: Any) -> Any:
    if setting.minimum is not None and value < setting.minimum:
        return setting.kind(setting.minimum)
    return value


def _type_problem(setting: Setting, value: Any) -> str | None:
    """Why ``value`` (set in code) is not of the setting's kind; ints pass as floats."""
    kind_ok = isinstance(value, setting.kind) and (
        setting.kind is bool or not isinstance(value, bool)
    )
    if setting.kind is float and isinstance(value, int) and not isinstance(value, bool):
        kind_ok = True
    if not kind_ok:
        return f"must be a {setting.kind.__name__}, got {value!r}"
    if setting.kind is float and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    return None


def _allowed(setting: Setting) -> str:
    return f"{_number(setting.minimum)}{' s' if setting.duration else ''}"


def _number(value: Any) -> str:
    """``1`` for 1.0 (what a user types), ``0.05``; anything else as repr."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return show(value)
