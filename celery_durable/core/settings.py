"""Every setting of celery_durable: its name, kind, default, minimum and help, one row each.

core/config.py reads them from ``Durable(...)`` keywords, ``CELERY_DURABLE_*`` env vars and
``app.conf``; the README's Configuration table documents the same rows.

Example::

    SETTINGS_BY_NAME["lock_timeout"].default   # 30.0
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    kind: type
    default: Any
    minimum: float | None = None
    help: str = ""
    # Seconds, given in any form validate.duration_seconds reads (30, "30s", "5m", "30d",
    # a timedelta); kind is float.
    duration: bool = False
    # May hold a password: Celery masks it in ``celery inspect conf`` and Flower.
    secret: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "database_url",
        str,
        "sqlite:///celery_durable.sqlite3",
        help="SQLAlchemy URL of the store (Postgres via psycopg 3, or SQLite)",
        secret=True,
    ),
    Setting(
        "database",
        str,
        "default",
        help="the Django database alias the store uses when no durable_database_url is "
        "given (with celery_durable.contrib.django installed)",
    ),
    Setting("lock_timeout", float, 30.0, 1.0, "how long a worker's lease lasts", duration=True),
    Setting("poll_interval", float, 1.0, 0.05, "time between two sweeps", duration=True),
    Setting("max_attempts", int, 3, 1, "default attempts of a workflow"),
    Setting("retry_backoff", float, 5.0, 0.0, "first workflow retry delay", duration=True),
    Setting("max_retry_backoff", float, 3600.0, 0.0, "cap of the retry delay", duration=True),
    Setting(
        "dispatch_grace",
        float,
        60.0,
        1.0,
        "how long a published run may wait in the queue before the sweeper publishes it again",
        duration=True,
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
    Setting("max_steps", int, 10_000, 1, "steps one run (generation) may record"),
    Setting("max_child_depth", int, 32, 1, "how deep child workflows may nest"),
    Setting("max_map_items", int, 100_000, 1, "items one cd.map may hold"),
    Setting(
        "max_payload_bytes",
        int,
        16 * 1024 * 1024,
        1024,
        "largest argument list, result, signal payload or state value, in bytes of JSON; "
        "anything larger is refused before it is stored",
    ),
    Setting(
        "max_payload_depth",
        int,
        100,
        1,
        "deepest nesting of lists and dicts in any such value; deeper is refused before it "
        "is stored or reaches a worker's pool",
    ),
    Setting(
        "max_recoveries",
        int,
        10,
        1,
        "times a run's worker may be lost (crash, OOM, SIGKILL) before the run fails as a "
        "poison run; separate from max_attempts",
    ),
    Setting(
        "max_dispatches",
        int,
        10,
        1,
        "times the sweeper publishes a run that no worker ever claims before it fails the "
        "run as poison",
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
        "how long a deferred step's record may wait for the next write before the worker "
        "writes it on its own (checked at every step)",
        duration=True,
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
        help="a direct Postgres URL (not through PgBouncer) for the LISTEN/NOTIFY wake-ups of "
        "handle waiters and the workers' proofs of life; default: durable_database_url, or "
        "polling and leases alone when durable_pgbouncer is on",
        secret=True,
    ),
    Setting(
        "retention",
        float,
        0.0,
        0.0,
        "finished runs older than this are deleted by the sweeper, in small batches; "
        "0 keeps them forever",
        duration=True,
    ),
    Setting(
        "log_json",
        bool,
        False,
        help="write celery_durable's log lines as JSON objects (celery_durable.logs)",
    ),
)
SETTINGS_BY_NAME = {s.name: s for s in SETTINGS}
# The settings' names as app.conf holds them, for Celery's masking of its configuration.
SECRET_SETTINGS = tuple(f"durable_{s.name}" for s in SETTINGS if s.secret)
