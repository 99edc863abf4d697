"""The Django test project (``tests/apps/django_project``) in subprocesses: its settings
through ``TEST_DJANGO_*`` variables, a Postgres database of its own (or a SQLite file), and
``manage.py`` commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.services import BROKER_URL, PG_URL, delete_queues, unique
from tests.support.workers import ROOT

APP = "tests.apps.django_project"
MANAGE = ROOT / "tests" / "apps" / "django_project" / "manage.py"
ADMIN_DSN = PG_URL.replace("postgresql+psycopg://", "postgresql://")


def require_django() -> None:
    """Skip without Django (the ``[django]`` extra), except under CI=true, where it fails."""
    try:
        import django  # noqa: F401, PLC0415
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip('Django is not installed: pip install -e ".[django,test]"')


class Project:
    """One configuration of the test project: its environment and its commands."""

    def __init__(self, database: str, tmp: Path) -> None:
        self.queue = unique("dj-")
        self.namespace = unique("dj")
        self.prefix = unique("dj_") + "_"
        self.pg_name = unique("dj_")
        self.sqlite_path = str(tmp / "django.sqlite3")
        self.database = database
        self.env: dict[str, str] = {
            # The session's CELERY_DURABLE_* settings are for its own app: blank, they
            # count as not given, and the project's Django settings apply.
            **{k: "" for k in os.environ if k.startswith("CELERY_DURABLE_")},
            "DJANGO_SETTINGS_MODULE": f"{APP}.settings",
            "TEST_DJANGO_DB": database,
            "TEST_DJANGO_PG_NAME": self.pg_name,
            "TEST_DJANGO_SQLITE_PATH": self.sqlite_path,
            "TEST_DJANGO_BROKER_URL": BROKER_URL,
            "TEST_DJANGO_QUEUE": self.queue,
            "TEST_DJANGO_NAMESPACE": self.namespace,
            "TEST_DJANGO_PREFIX": self.prefix,
        }

    def manage(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
        done = subprocess.run(
            [sys.executable, str(MANAGE), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **self.env, **(env or {})},
        )
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + ("" if check else done.stderr)

    def pytest(self, path: str) -> subprocess.CompletedProcess[str]:
        """pytest with pytest-django on a file of the project (no conftest of this suite:
        it configures the suite's own app)."""
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest"]
            + ["-p", "pytest_django", "-o", "django_find_project=false", path],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, **self.env},
        )

    def manage_json(self, *args: str) -> Any:
        return json.loads(self.manage(*args).strip().splitlines()[-1])

    @property
    def store_url(self) -> str:
        if self.database == "postgres":
            return PG_URL.rsplit("/", 1)[0] + "/" + self.pg_name
        return f"sqlite:///{self.sqlite_path}"

    def run_ids(self) -> list[str]:
        """The ids of the project's stored runs, read apart from Django."""
        import sqlalchemy as sa  # noqa: PLC0415

        engine = sa.create_engine(self.store_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text(f"SELECT id FROM {self.prefix}runs ORDER BY id"))
                return [row[0] for row in rows]
        finally:
            engine.dispose()


@contextmanager
def postgres_database(name: str | None) -> Iterator[None]:
    """A Postgres database of its own (none for ``None``), dropped afterwards even while
    a process still holds a connection to it."""
    if name is not None:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield
    finally:
        if name is not None:
            with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def project(database: str, tmp: Path) -> Iterator[Project]:
    """A configuration of the project with its own database (Postgres) or file (SQLite),
    dropped afterwards, as is its queue."""
    made = Project(database, tmp)
    try:
        with postgres_database(made.pg_name if database == "postgres" else None):
            yield made
    finally:
        delete_queues(BROKER_URL, [made.queue])
