"""A store of the tests' own: a SQLite file in a temp dir, made once per session. The
workflows' fixture, ``durable_eager``, comes from celery_durable.testing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from celery_durable.testing import durable_eager  # noqa: F401 - the fixture, for every test


@pytest.fixture(scope="session", autouse=True)
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    path = tmp_path_factory.mktemp("store") / "booking.sqlite3"
    with pytest.MonkeyPatch.context() as env:
        # Read when the store is first used: set before any test starts a run.
        env.setenv("CELERY_DURABLE_DATABASE_URL", f"sqlite:///{path}")
        from booking import durable  # noqa: PLC0415

        durable.migrate()  # the tables, as `celery -A booking durable migrate` makes them
        yield
        durable.runtime.store.dispose()
