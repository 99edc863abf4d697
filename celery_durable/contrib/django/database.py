"""The store's URL from Django's ``DATABASES``: the alias ``durable_database`` names
(``"default"`` unless ``CELERY_DURABLE_DATABASE`` says otherwise), used when no
``durable_database_url`` is given.

Example::

    url_of_alias("default")   # 'postgresql+psycopg://postgres@127.0.0.1:5432/shop'
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import URL

from celery_durable.core import config
from celery_durable.errors import ConfigurationError

ENGINES = {
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.db.backends.sqlite3": "sqlite",
}
# OPTIONS Django reads itself, not libpq connection parameters.
DJANGO_ONLY_OPTIONS = frozenset(
    {"isolation_level", "pool", "server_side_binding", "assume_role", "cursor_factory"}
)
ORIGIN = "DATABASES[{alias!r}]"


def url_of_alias(alias: str) -> str:
    """The SQLAlchemy URL of ``DATABASES[alias]``: its engine, name, host, port, user,
    password and OPTIONS. ConfigurationError for an unknown alias or engine."""
    from django.db import connections  # noqa: PLC0415 - read when the config is first used

    # The connections' settings, not settings.DATABASES alone: Django's test runner points
    # them at the test database, and so the store follows it there.
    databases: dict[str, dict[str, Any]] = {a: connections.settings[a] for a in connections}
    if alias not in databases:
        raise ConfigurationError(
            f"durable_database (CELERY_DURABLE_DATABASE): no database alias {alias!r} in "
            f"DATABASES (aliases: {sorted(databases)})"
        )
    entry = databases[alias]
    engine = entry.get("ENGINE", "")
    if engine not in ENGINES:
        raise ConfigurationError(
            f"DATABASES[{alias!r}] uses the engine {engine!r}, which celery_durable can't "
            f"store in; use one of {sorted(ENGINES)}, or set CELERY_DURABLE_DATABASE_URL"
        )
    if ENGINES[engine] == "sqlite":
        name = str(entry.get("NAME") or "")
        if not name or name == ":memory:" or name.startswith("file:"):
            raise ConfigurationError(
                f"DATABASES[{alias!r}]: an in-memory SQLite database ({name!r}) can't be "
                "shared with workers; give it a file NAME, or set CELERY_DURABLE_DATABASE_URL"
            )
        return URL.create("sqlite", database=name).render_as_string(hide_password=False)
    options = {
        key: str(value)
        for key, value in (entry.get("OPTIONS") or {}).items()
        if key not in DJANGO_ONLY_OPTIONS and isinstance(value, str | int | float)
    }
    url = URL.create(
        ENGINES[engine],
        username=entry.get("USER") or None,
        password=entry.get("PASSWORD") or None,
        host=entry.get("HOST") or None,
        port=int(entry["PORT"]) if entry.get("PORT") else None,
        database=entry.get("NAME") or None,
        query=options,
    )
    return url.render_as_string(hide_password=False)


def _from_django(alias: str) -> tuple[str, str] | None:
    from django.conf import settings  # noqa: PLC0415

    if not settings.configured:
        return None
    return url_of_alias(alias), ORIGIN.format(alias=alias)


def install() -> None:
    """Let every Durable's config fall back on ``DATABASES`` (once)."""
    if _from_django not in config.DATABASE_URL_SOURCES:
        config.DATABASE_URL_SOURCES.append(_from_django)


def from_django(durable_config: Any) -> str | None:
    """The alias a config's store URL came from (None: it was given otherwise)."""
    given = durable_config.given.get("database_url")
    if given is None or not given.origin.startswith("DATABASES["):
        return None
    return str(durable_config.database)
