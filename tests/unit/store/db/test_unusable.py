"""What makes a database unusable (missing tables, database or role), told apart from an
outage and from any other error, on the real drivers' errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from celery_durable.errors import ConfigurationError
from celery_durable.store import Store
from celery_durable.store.db.outage import is_unreachable
from celery_durable.store.db.unusable import AUTH, DATABASE, TABLES, unusable
from tests.support.services import PG_URL


def error_of(store: Store) -> Exception:
    with pytest.raises(Exception) as raised:
        store.get_status("some-run")
    return raised.value


@pytest.fixture(params=["postgresql", "sqlite"])
def unmigrated(request, tmp_path: Path):  # type: ignore[no-untyped-def]
    url = PG_URL if request.param == "postgresql" else f"sqlite:///{tmp_path}/empty.sqlite3"
    store = Store(url, "nomigrate_", "ns")
    yield store
    store.dispose()


def test_missing_tables_name_migrate(unmigrated):
    exc = error_of(unmigrated)
    found = unusable(exc, unmigrated.table_prefix)
    assert found is not None and found.kind == TABLES
    assert "nomigrate_runs" in found.text
    assert "celery -A shop durable migrate" in found.fix("shop")
    assert unusable(exc, "other_") is None  # a table that isn't the store's: a bug
    assert not is_unreachable(exc)


def test_the_store_own_error_is_seen_through(unmigrated):
    """Store.raise_if_tables_missing raises ConfigurationError from the driver's error."""
    with pytest.raises(ConfigurationError) as raised:
        unmigrated.raise_if_tables_missing(error_of(unmigrated))
    found = unusable(raised.value, unmigrated.table_prefix)
    assert found is not None and found.kind == TABLES


@pytest.mark.parametrize(
    "url, kind",
    [
        (PG_URL.rsplit("/", 1)[0] + "/no_such_database_i41", DATABASE),
        (PG_URL.replace("postgres@", "no_such_role_i41:pw@"), AUTH),
        ("sqlite:////nonexistent-i41/store.sqlite3", DATABASE),
    ],
)
def test_a_database_that_cannot_serve(url, kind):
    store = Store(url, "p_", "ns")
    try:
        found = unusable(error_of(store), "p_")
    finally:
        store.dispose()
    assert found is not None and found.kind == kind, found


def test_a_refused_connection_is_an_outage_not_unusable():
    store = Store("postgresql+psycopg://postgres@127.0.0.1:9/test", "p_", "ns")
    try:
        exc = error_of(store)
    finally:
        store.dispose()
    assert is_unreachable(exc) and unusable(exc, "p_") is None
