"""Settings, read from ``Durable(...)`` keywords, ``CELERY_DURABLE_*`` env vars and ``app.conf``.

Precedence, highest first: keyword arguments, environment, Celery configuration, defaults.

Example::

    app.conf.durable_lock_timeout = 60          # or CELERY_DURABLE_LOCK_TIMEOUT=60
    durable = Durable(app, database_url="postgresql+psycopg://postgres@127.0.0.1/shop")
    durable.config.lock_timeout                 # 60.0
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from .errors import ConfigurationError, InvalidArgument
from .validate import parse_duration

logger = logging.getLogger("celery_durable.config")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,30}$")


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    kind: type
    default: Any
    minimum: float | None = None
    help: str = ""
    # Seconds, also written "30d", "12h", "90m" or as a timedelta.
    duration: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "database_url",
        str,
        "sqlite:///celery_durable.sqlite3",
        help="SQLAlchemy URL of the store (Postgres via psycopg 3, or SQLite)",
    ),
    Setting("lock_timeout", float, 30.0, 1.0, "seconds a worker's lease on a run lasts"),
    Setting("poll_interval", float, 1.0, 0.05, "seconds between two sweeps"),
    Setting("max_attempts", int, 3, 1, "default attempts of a workflow"),
    Setting("retry_backoff", float, 5.0, 0.0, "default first workflow retry delay, seconds"),
    Setting("max_retry_backoff", float, 3600.0, 0.0, "cap of the exponential retry delay"),
    Setting(
        "dispatch_grace",
        float,
        60.0,
        1.0,
        "seconds a published run may wait in the queue before the sweeper publishes it again",
    ),
    Setting("table_prefix", str, "durable_", help="prefix of the tables"),
    Setting("namespace", str, "default", help="runs of other namespaces are invisible"),
    Setting(
        "signal_queue",
        str,
        "",
        help="queue of signal wake-ups; default celery_durable.signals, with "
        ".<namespace> appended outside the default namespace",
    ),
    Setting("max_pending_signals", int, 100, 1, "unconsumed signals a run may hold"),
    Setting(
        "max_payload_bytes",
        int,
        16 * 1024 * 1024,
        1024,
        "largest argument list, result, signal payload or state value, in bytes of JSON; "
        "anything larger is refused before it is stored",
    ),
    Setting(
        "max_recoveries",
        int,
        10,
        1,
        "times a run's worker may be lost (crash, OOM, SIGKILL) before the run fails as a "
        "poison run; separate from max_attempts",
    ),
    Setting("sweep_batch", int, 500, 1, "runs one sweep dispatches at most"),
    Setting(
        "deferred_max_steps",
        int,
        100,
        1,
        "records of deferred steps (commit='deferred') a worker holds before it writes them "
        "on its own",
    ),
    Setting(
        "deferred_max_age",
        float,
        1.0,
        0.0,
        "seconds a deferred step's record may wait for the next write before the worker "
        "writes it on its own (checked at every step)",
    ),
    Setting(
        "pgbouncer",
        bool,
        False,
        help="durable_database_url goes through PgBouncer in transaction pooling mode: no "
        "server-side prepared statements, no session state, no LISTEN through it",
    ),
    Setting(
        "listen_url",
        str,
        "",
        help="a direct Postgres URL for LISTEN/NOTIFY wake-ups of handle waiters; default: "
        "durable_database_url, or polling when durable_pgbouncer is on",
    ),
    Setting(
        "retention",
        float,
        0.0,
        0.0,
        "finished runs older than this are deleted by the sweeper, in small batches "
        "(seconds, or 30d, 12h...); 0 keeps them forever",
        duration=True,
    ),
    Setting(
        "log_json",
        bool,
        False,
        help="write celery_durable's log lines as JSON objects (celery_durable.logs)",
    ),
)
_BY_NAME = {s.name: s for s in SETTINGS}


@dataclasses.dataclass
class DurableConfig:
    """Validated settings of one :class:`~celery_durable.Durable` instance."""

    database_url: str = "sqlite:///celery_durable.sqlite3"
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
    max_payload_bytes: int = 16 * 1024 * 1024
    max_recoveries: int = 10
    sweep_batch: int = 500
    deferred_max_steps: int = 100
    deferred_max_age: float = 1.0
    pgbouncer: bool = False
    listen_url: str = ""
    retention: float = 0.0
    log_json: bool = False

    @classmethod
    def from_sources(
        cls,
        overrides: Mapping[str, Any] | None = None,
        app_conf: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> DurableConfig:
        """Merge the sources; out-of-range numbers are clamped with a warning."""
        overrides = cls.check_keywords(overrides or {})
        environ = os.environ if environ is None else environ
        app_conf = app_conf or {}
        values: dict[str, Any] = {}
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
            values[setting.name] = _clamp(setting, _coerce(setting, raw, origin), origin)
        if not values["signal_queue"]:
            # Apps of two namespaces on one broker must not take each other's signals.
            values["signal_queue"] = default_signal_queue(values["namespace"])
        config = cls(**values)
        config.validate()
        return config

    @staticmethod
    def check_keywords(overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``Durable(...)`` keywords on their own: known names, right types.

        Cross-field rules (``lock_timeout`` > ``poll_interval``) wait for the merge: the
        other field may come from the environment or ``app.conf``.
        """
        unknown = set(overrides) - set(_BY_NAME)
        if unknown:
            raise ConfigurationError(
                f"unknown celery_durable setting(s): {', '.join(sorted(unknown))}; "
                f"known: {', '.join(_BY_NAME)}"
            )
        for name, raw in overrides.items():
            if raw is not None:
                _coerce(_BY_NAME[name], raw, f"Durable({name}=...)")
        return dict(overrides)

    def validate(self) -> DurableConfig:
        """Raise :class:`ConfigurationError` naming the first setting out of range."""
        for setting in SETTINGS:
            value = getattr(self, setting.name)
            if not isinstance(value, setting.kind) or (
                isinstance(value, bool) and setting.kind is not bool
            ):
                if not (
                    setting.kind is float and isinstance(value, int) and not isinstance(value, bool)
                ):
                    raise ConfigurationError(
                        f"durable_{setting.name} must be a {setting.kind.__name__}, got {value!r}"
                    )
            if setting.minimum is not None and value < setting.minimum:
                raise ConfigurationError(
                    f"durable_{setting.name}={value!r} is below its minimum {setting.minimum}"
                )
        if not _IDENTIFIER.match(self.table_prefix + "x"):
            raise ConfigurationError(
                f"durable_table_prefix={self.table_prefix!r} must be letters, digits and "
                "underscores, start with a letter or underscore, at most 30 characters"
            )
        if not self.namespace or len(self.namespace) > 200:
            raise ConfigurationError(
                f"durable_namespace={self.namespace!r} must be 1 to 200 characters"
            )
        if not self.database_url:
            raise ConfigurationError("durable_database_url is empty")
        if self.lock_timeout <= self.poll_interval:
            raise ConfigurationError(
                f"durable_lock_timeout={self.lock_timeout} must exceed "
                f"durable_poll_interval={self.poll_interval}"
            )
        return self


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
    if setting.kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _BOOLS:
            return _BOOLS[raw.strip().lower()]
        raise ConfigurationError(
            f"{origin}={raw!r} is not a valid bool for durable_{setting.name} "
            "(use true/false, 1/0, yes/no or on/off)"
        )
    if setting.duration and not isinstance(raw, bool):
        try:
            return parse_duration(raw, origin)
        except InvalidArgument:
            raise ConfigurationError(
                f"{origin}={raw!r} is not a valid duration for durable_{setting.name} "
                "(seconds, or a number and a unit: 90m, 12h, 30d)"
            ) from None
    try:
        if isinstance(raw, bool):
            raise ValueError(raw)
        return setting.kind(raw)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"{origin}={raw!r} is not a valid {setting.kind.__name__} for durable_{setting.name}"
        ) from None


def _clamp(setting: Setting, value: Any, origin: str) -> Any:
    if setting.minimum is not None and value < setting.minimum:
        clamped = setting.kind(setting.minimum)
        logger.warning(
            "%s=%r is below the safe minimum; using %r",
            origin,
            value,
            clamped,
            extra={"setting": f"durable_{setting.name}"},
        )
        return clamped
    return value
