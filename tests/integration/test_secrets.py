"""No password in what the library prints: database URLs in CLI errors and in a worker's
CRITICAL line (the libpq spelling, a wrong backend, a malformed URL, a password in the
query), ``durable_listen_url`` in Celery's ``conf`` reply and Flower's worker page, and a
run's result in the worker's "Task ... succeeded" line (``durable_redact``)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import celery
from tests.support.flower import Flower
from tests.support.services import PG_URL, unique
from tests.support.waiting import wait_until
from tests.support.workers import CeleryProcess, Worker, worker_arguments

SECRET = "s3cret-pw"
BAD_URLS = {
    "libpq spelling": f"postgres://postgres:{SECRET}@127.0.0.1/test",
    "wrong backend": f"mysql://root:{SECRET}@127.0.0.1/shop",
    "malformed": f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:notaport/test",
    "@ in the password": f"postgresql+psycopg://postgres:{SECRET}@x@127.0.0.1:notaport/test",
}


def refusal(env: dict[str, str]) -> str:
    """What ``durable list`` printed when refusing the settings in ``env``: checked to
    hold no password."""
    done = celery("durable", "list", env=env)
    assert done.returncode != 0
    assert SECRET not in done.stdout + done.stderr
    return done.stderr


@pytest.mark.parametrize("url", BAD_URLS.values(), ids=BAD_URLS.keys())
def test_a_cli_error_masks_the_database_url(basic_app, url):
    assert ":***@" in refusal({"CELERY_DURABLE_DATABASE_URL": url})


def test_a_cli_error_masks_a_password_in_the_query(basic_app):
    """The URL is valid; the role is not, so the message names the database."""
    url = f"postgresql+psycopg://nobody-{unique('r')}@127.0.0.1:5432/test?sslpassword={SECRET}"
    assert "sslpassword=***" in refusal({"CELERY_DURABLE_DATABASE_URL": url})


def test_a_cli_error_masks_a_malformed_listen_url(basic_app):
    url = f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:notaport/test"
    said = refusal({"CELERY_DURABLE_LISTEN_URL": url})
    assert "durable_listen_url='postgresql+psycopg://postgres:***@" in said


@pytest.mark.parametrize("name", ["libpq spelling", "malformed"])
def test_a_worker_refusing_its_database_url_masks_it(basic_app, name):
    worker = CeleryProcess(
        "tests.apps.basic",
        worker_arguments(unique("bad-url"), queues=unique("q-nobody-")),
        {"CELERY_DURABLE_DATABASE_URL": BAD_URLS[name]},
        "worker-bad-url",
    )
    try:
        assert worker.wait_exit(60) != 0
    finally:
        worker.kill()
    log = worker.log()
    critical = [line for line in log.splitlines() if "CRITICAL" in line]
    assert critical and "durable_database_url=" in critical[0], log
    assert ":***@" in critical[0]
    assert SECRET not in log


@pytest.fixture(scope="module")
def config_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Celery config module (``CELERY_CONFIG_MODULE``) that puts a listen URL with a
    password, and ``durable_redact``, in the worker's ``app.conf``. Postgres trusts local
    connections here, so the password is sent nowhere but the LISTEN URL works."""
    folder = tmp_path_factory.mktemp("secret-conf")
    url = PG_URL.replace("postgres@", f"postgres:{SECRET}@", 1)
    assert SECRET in url
    (folder / "secret_conf.py").write_text(
        f"durable_listen_url = {url!r}\ndurable_redact = ['token']\n"
    )
    return folder


@pytest.fixture(scope="module")
def secret_worker(basic_app: Any, config_module: Path) -> Iterator[Worker]:
    env = {
        "CELERY_CONFIG_MODULE": "secret_conf",
        "PYTHONPATH": os.pathsep.join([str(config_module), os.environ.get("PYTHONPATH", "")]),
    }
    worker = Worker("tests.apps.basic", env, queues=os.environ["TEST_QUEUE"], name=unique("secret"))
    worker.wait_ready()
    yield worker
    worker.kill()


def node_of(worker: Worker) -> str:
    name = next(arg for arg in worker.proc.args if str(arg).endswith("@%h"))
    return str(name).replace("%h", socket.gethostname())


def test_the_conf_reply_masks_the_library_secret_settings(basic_app, secret_worker):
    """``celery inspect conf``'s answer: Celery masks by setting name, and the library's
    URL settings are among the names."""
    node = node_of(secret_worker)
    replies = basic_app.app.control.inspect(destination=[node], timeout=10).conf() or {}
    conf = replies[node]
    assert conf["durable_listen_url"] == "********"
    assert SECRET not in repr(conf)
    done = celery("inspect", "conf", "-d", node, "--timeout", "10")
    assert done.returncode == 0, done.stderr
    assert "durable_listen_url" in done.stdout and SECRET not in done.stdout


def test_flower_worker_page_masks_the_listen_url(basic_app, secret_worker):
    flower = Flower("tests.apps.basic").wait_ready()
    try:
        node = node_of(secret_worker)

        def conf() -> dict[str, Any] | None:
            workers = flower.api("GET", f"/api/workers?refresh=1&workername={node}")
            return (workers.get(node) or {}).get("conf")

        shown = wait_until(conf, 60, 0.5, "Flower to show the worker's conf")
        assert shown["durable_listen_url"] == "********"
        assert SECRET not in repr(shown)
    finally:
        flower.stop()


def test_the_success_line_of_a_run_applies_durable_redact(basic_app, secret_worker, key):
    handle = basic_app.collector.delay(key, 1)
    handle.signal("item", {"token": SECRET, "sku": "A-1"})
    assert handle.get(timeout=30) == [{"token": SECRET, "sku": "A-1"}]
    succeeded = f"[{handle.id}] succeeded in"

    def line() -> str | None:
        return next((s for s in secret_worker.log().splitlines() if succeeded in s), None)

    shown = wait_until(line, 30, 0.1, lambda: f"the success line; log:\n{secret_worker.log()}")
    assert "'token': '***'" in shown and "'sku': 'A-1'" in shown
    assert SECRET not in secret_worker.log()
