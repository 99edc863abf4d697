"""celery_durable.contrib.django in a real Django project (``tests/apps/django_project``),
on Postgres and SQLite, with a real worker: the store found in ``DATABASES``, starts that
commit and roll back with the view's ``transaction.atomic()``, the tables made and
upgraded by ``manage.py migrate``, and ``manage.py durable``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from celery_durable.store import Store
from celery_durable.store.migrations import Migrated, current, upgrade
from tests.support.django import ADMIN_DSN, APP, Project, project, require_django
from tests.support.services import BROKER_URL, delete_queues, queue_length, unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker

require_django()
pytestmark = pytest.mark.broker  # every test publishes, or checks nothing was published


@pytest.fixture(scope="module")
def pg_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    with project("postgres", tmp_path_factory.mktemp("django")) as made:
        made.manage("migrate", "--noinput")
        yield made


def store_of(made: Project) -> Store:
    return Store(made.store_url, made.prefix, made.namespace)


def test_migrate_makes_the_durable_tables_and_then_has_nothing_to_do(pg_project):
    again = pg_project.manage("migrate", "--noinput")
    assert "No migrations to apply" in again
    assert pg_project.run_ids() == []  # the table is there, in the project's database
    assert pg_project.manage("durable", "list", "--json").strip() == ""  # a line per run


@pytest.mark.parametrize("database", ["postgres", "sqlite"])
def test_migrate_upgrades_tables_an_older_release_made(database: str, tmp_path: Path):
    # A project migrated under a release whose head was 0012: its tables at 0012, and the
    # app's migrations of that release (0001-0003) recorded as applied.
    with project(database, tmp_path) as made:
        store = store_of(made)
        try:
            older = upgrade(store, revision="0012")
            assert isinstance(older, Migrated) and older.after == "0012" != older.head
            made.manage("migrate", "--fake", "celery_durable", "0003")
            made.manage("migrate", "--noinput")  # with the new release installed
            assert current(store) == older.head
            tables = sa.inspect(store.engine).get_table_names()
            assert f"{made.prefix}actions" in tables
        finally:
            store.dispose()


@pytest.mark.parametrize("how", ["--rollback", "--fail"])
def test_a_rolled_back_view_leaves_no_run_and_no_message(pg_project, how):
    undone = pg_project.manage_json("place_order", how)  # --fail: raises after .delay()
    assert undone["order"] not in undone["orders"] and undone.get("failed", False) == (
        how == "--fail"
    )
    assert undone["run"] not in pg_project.run_ids()
    assert queue_length(BROKER_URL, pg_project.queue) == 0  # no worker serves it yet


def test_a_run_started_in_a_rolled_back_savepoint_never_existed(pg_project):
    placed = pg_project.manage_json("place_order", "--savepoint")
    ids = pg_project.run_ids()
    assert placed["run"] in ids and placed["rolled_back_run"] not in ids
    wait_until(lambda: queue_length(BROKER_URL, pg_project.queue) == 1, 10, message="one message")


def test_delay_on_commit_starts_only_once_the_view_commits(pg_project):
    before = set(pg_project.run_ids())
    failed = pg_project.manage_json("place_order", "--on-commit", "--fail")
    assert failed["failed"] and set(pg_project.run_ids()) == before
    pg_project.manage_json("place_order", "--on-commit")
    assert len(set(pg_project.run_ids()) - before) == 1


def test_in_a_django_test_case_the_run_is_visible_and_published_by_the_captured_commit(
    pg_project,
):
    # Django's runner makes and drops a test database of its own (test_<name>): the store
    # follows DATABASES there, and lets it be dropped.
    queue = unique("dj-t")
    try:
        said = pg_project.manage(
            "test",
            "tests.apps.django_project.shop",
            "--noinput",
            env={"TEST_DJANGO_QUEUE": queue},
            check=False,
        )
    finally:
        delete_queues(BROKER_URL, [queue])
    assert "Ran 1 test" in said and "\nOK" in said, said


def test_the_eager_fixture_runs_a_workflow_with_a_signal_a_timer_and_a_fan_out(pg_project):
    done = pg_project.pytest("tests/apps/django_project/shop/eager_checks.py")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr


def test_a_committed_view_starts_a_run_that_a_worker_completes(pg_project):
    worker = Worker(APP, pg_project.env, queues=pg_project.queue, name="dj", concurrency=2)
    try:
        worker.wait_ready()
        placed = pg_project.manage_json("place_order")
        store = store_of(pg_project)
        done = wait_until(
            lambda: (
                (run := store.get_run(placed["run"])) is not None
                and run.status == "SUCCEEDED"
                and run
            ),
            60,
            message=lambda: f"the checkout; worker log:\n{worker.log()}",
        )
        assert json.loads(done.result) == {"order": placed["order"], "status": "paid"}
        dsn = ADMIN_DSN.rsplit("/", 1)[0] + "/" + pg_project.pg_name
        with psycopg.connect(dsn) as conn:
            status = conn.execute(
                "SELECT status FROM shop_order WHERE id = %s", (placed["order"],)
            ).fetchone()
        assert status == ("paid",)
        listed = pg_project.manage("durable", "list", "--json").splitlines()
        assert placed["run"] in {json.loads(line)["id"] for line in listed}
    finally:
        worker.kill()


def test_the_store_is_built_from_a_sqlite_database_setting(tmp_path: Path):
    with project("sqlite", tmp_path) as made:
        made.manage("migrate", "--noinput")
        placed = made.manage_json("place_order")
        assert made.run_ids() == [placed["run"]]
        shown = json.loads(made.manage("durable", "show", placed["run"], "--json"))
        assert shown["status"] == "PENDING" and shown["workflow"] == "django_project.checkout"


def test_in_a_django_test_case_on_sqlite_the_store_works_inside_the_tests_transaction(
    tmp_path: Path,
):
    # TestCase's transaction holds the SQLite file for the whole test: the store's reads,
    # its cancel, and an eager run's claim and steps go on Django's connection.
    with project("sqlite", tmp_path) as made:
        said = made.manage(
            "test", "tests.apps.django_project.shop.sqlite_checks", "--noinput", check=False
        )
    assert "Ran 2 tests" in said and "\nOK" in said, said


def test_an_engine_the_store_cant_use_is_refused_naming_the_alias(tmp_path: Path):
    with project("sqlite", tmp_path) as made:
        other = {
            "TEST_DJANGO_ALIAS": "other",
            "TEST_DJANGO_OTHER_ENGINE": "django.db.backends.mysql",
        }
        said = made.manage("durable", "list", env=other, check=False)
        assert "DATABASES['other'] uses the engine 'django.db.backends.mysql'" in said
        assert "django.db.backends.postgresql" in said and "django.db.backends.sqlite3" in said
