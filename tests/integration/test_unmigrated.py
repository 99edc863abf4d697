"""A worker started on a database nobody migrated: a run started by name (``celery call``)
is kept, redelivered until ``durable migrate``, then runs, on Postgres and on SQLite; and
one that meets an unreachable database stays a start by name until it is back."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from celery_durable.store import Store
from tests.conftest import NAMESPACE, QUEUE
from tests.support.cli import celery
from tests.support.proxy import TcpProxy
from tests.support.services import PG_URL, drop_tables, unique
from tests.support.waiting import wait_until

MIGRATE = "run `celery -A tests.apps.basic durable migrate`"
KEPT = "the delivery is kept, delivered again"


@pytest.fixture(params=["postgresql", "sqlite"])
def unmigrated(request, tmp_path) -> Iterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    """The settings of a database with none of the store's tables (a prefix of its own)."""
    prefix = unique("u")[:9] + "_"
    url = PG_URL if request.param == "postgresql" else f"sqlite:///{tmp_path}/store.sqlite3"
    yield {"CELERY_DURABLE_DATABASE_URL": url, "CELERY_DURABLE_TABLE_PREFIX": prefix}
    if request.param == "postgresql":
        drop_tables(PG_URL, prefix)


def test_a_start_by_name_waits_for_migrate(basic_app, start_worker, key, unmigrated):
    """Bug: the worker logged UndefinedTable and acknowledged the message: after
    `durable migrate`, `durable show` said there was no such run."""
    worker = start_worker(env=unmigrated, concurrency=1)
    name = basic_app.five_steps.name
    called = celery("call", name, "--args", json.dumps([key]), "--queue", QUEUE, env=unmigrated)
    assert called.returncode == 0, called.stderr
    run_id = called.stdout.strip().splitlines()[-1]
    # Kept and delivered again (not an attempt of the run), the fix said once.
    wait_until(lambda: worker.log().count(KEPT) >= 3, 60, message=lambda: worker.log())
    log = worker.log()
    assert log.count(MIGRATE) == 1, log
    assert f"run {run_id}: the database is not usable" in log
    migrated = celery("durable", "migrate", env=unmigrated)
    assert migrated.returncode == 0, migrated.stderr
    store = Store(
        unmigrated["CELERY_DURABLE_DATABASE_URL"],
        unmigrated["CELERY_DURABLE_TABLE_PREFIX"],
        NAMESPACE,
    )
    try:

        def finished() -> str | None:
            run = store.get_run(run_id)
            return (
                run.status
                if run is not None and run.status != "PENDING" and run.status != "RUNNING"
                else None
            )

        assert wait_until(finished, 60, message=lambda: worker.log()) == "SUCCEEDED"
        assert store.get_run(run_id).attempts == 1  # the redeliveries were no attempts
    finally:
        store.dispose()
    shown = celery("durable", "show", run_id, env=unmigrated)
    assert shown.returncode == 0 and "SUCCEEDED" in shown.stdout, shown.stderr


def test_a_start_by_name_during_an_outage_stays_one(basic_app, start_worker, key):
    """Bug: the redelivery of a by-name start that met an unreachable database was marked
    as a stored run's: once the database was back the worker found no run and dropped it."""
    with TcpProxy.to_url(PG_URL) as proxy:
        env = {"CELERY_DURABLE_DATABASE_URL": proxy.url(PG_URL)}
        worker = start_worker("by-name-outage", env=env)
        proxy.cut()
        name = basic_app.five_steps.name
        called = celery("call", name, "--args", json.dumps([key]), "--queue", QUEUE)
        assert called.returncode == 0, called.stderr
        run_id = called.stdout.strip().splitlines()[-1]
        wait_until(
            lambda: f"run {run_id}: the database is unreachable" in worker.log(),
            30,
            message=lambda: worker.log()[-3000:],
        )
        proxy.restore()
        store = basic_app.durable.runtime.store
        # Created by its next delivery (backing off up to 10 s), never dropped.
        wait_until(lambda: store.get_status(run_id), 30, message=lambda: worker.log()[-3000:])
        assert basic_app.durable.get_handle(run_id).get(timeout=30) == [10, 20, 30, 40, 50]
