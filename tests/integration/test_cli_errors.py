"""``celery -A app durable cancel|signal`` on runs they can't act on: one clean line, exit 1."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.cli import celery
from tests.support.services import PG_URL


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def finished_run(basic_app, key) -> str:  # type: ignore[no-untyped-def]
    """A run that ended (cancelled before any worker took it)."""
    handle = basic_app.cancellable.apply_async(args=(key,), queue=f"nobody-{key}")
    handle.cancel("finished for the test")
    return str(handle.id)


def test_cancel_a_finished_run_prints_its_status(finished_run):
    """Bug: a traceback of WorkflowAlreadyCompleted."""
    line = one_error_line(celery("durable", "cancel", finished_run))
    assert line == (
        f"Error: cannot cancel workflow run {finished_run!r}: its status is CANCELLED (finished)"
    )


def test_signal_a_finished_run_prints_its_status(finished_run):
    line = one_error_line(celery("durable", "signal", finished_run, "approval", '{"by": "x"}'))
    assert line == (
        f"Error: cannot signal 'approval' to workflow run {finished_run!r}: "
        "its status is CANCELLED (finished)"
    )


@pytest.mark.parametrize("command", [("cancel",), ("signal", "approval")])
def test_unknown_run_prints_one_line(basic_app, key, command):
    """Bug: a traceback of WorkflowNotFound."""
    line = one_error_line(celery("durable", *command[:1], f"nope-{key}", *command[1:]))
    namespace = basic_app.durable.config.namespace
    assert f"workflow run 'nope-{key}': no such run in namespace {namespace!r}" in line


def test_an_id_amqp_cannot_carry_is_a_bad_parameter(basic_app):
    emoji = "\N{GRINNING FACE}" * 100
    for command in (("cancel", emoji), ("signal", emoji, "approval"), ("show", emoji)):
        done = celery("durable", *command)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "Invalid value for RUN_ID: run_id=" in done.stderr
        assert "400 bytes in UTF-8, over the limit of 255" in done.stderr


MIGRATE = "run `celery -A tests.apps.basic durable migrate`"


@pytest.fixture(params=["postgresql", "sqlite"])
def unmigrated(request, tmp_path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Settings naming a database that exists but holds no tables of the prefix."""
    url = PG_URL if request.param == "postgresql" else f"sqlite:///{tmp_path}/empty.sqlite3"
    return {"CELERY_DURABLE_DATABASE_URL": url, "CELERY_DURABLE_TABLE_PREFIX": "nomigrate_"}


@pytest.mark.parametrize(
    "command",
    [
        ("list",),
        ("show", "some-run"),
        ("stats",),
        ("cancel", "some-run"),
        ("limiters",),
        ("schedules",),
    ],
)
def test_commands_on_an_unmigrated_database_name_migrate(unmigrated, command):
    """Bug: 110-156 lines of SQLAlchemy traceback (UndefinedTable, no such table)."""
    line = one_error_line(celery("durable", *command, env=unmigrated))
    assert line.startswith("Error: ") and "nomigrate_" in line, line
    assert MIGRATE in line


MISSING = {
    "missing database": (
        PG_URL.rsplit("/", 1)[0] + "/no_such_database_i41",
        "create the database",
    ),
    "unknown role": (
        PG_URL.replace("postgres@", "no_such_role_i41:secret@"),
        "correct the user or password in durable_database_url",
    ),
    "missing sqlite directory": (
        "sqlite:////nonexistent-i41/dir/store.sqlite3",
        "create the database (SQLite: its directory)",
    ),
}


@pytest.mark.parametrize("url, fix", MISSING.values(), ids=list(MISSING))
@pytest.mark.parametrize("command", [("list",), ("show", "some-run"), ("migrate",)])
def test_a_database_that_cannot_serve_is_one_line_at_once(url, fix, command):
    """Bug: a traceback (list, migrate), or show retried for 10 s, saying "unreachable"."""
    line = one_error_line(celery("durable", *command, env={"CELERY_DURABLE_DATABASE_URL": url}))
    assert line.startswith(f"Error: durable {command[0]}: the database") or line.startswith(
        "Error: cannot list runs: the database"
    ), line
    assert fix in line and "tried for" not in line, line  # show gave up at once
    assert "secret" not in line


@pytest.mark.parametrize("command", [("show", "some-run"), ("migrate",), ("list",)])
def test_a_bad_scheme_is_one_line(command):
    env = {"CELERY_DURABLE_DATABASE_URL": "mysql://127.0.0.1/shop"}
    line = one_error_line(celery("durable", *command, env=env))
    assert "durable_database_url='mysql://127.0.0.1/shop'" in line and "supported" in line


def test_a_refused_connection_is_still_retried_by_show():
    """Transient: nothing listens (a restart), so show retries up to --timeout."""
    env = {"CELERY_DURABLE_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:9/test"}
    line = one_error_line(celery("durable", "show", "some-run", "--timeout", "0.5", env=env))
    assert "(tried for 0.5s)" in line and "is unreachable" in line, line
