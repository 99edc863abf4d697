"""Fixtures that start real services' clients and real worker subprocesses.

Each test session gets its own table prefix (dropped at the end), namespace and queue, so
leftovers of other runs on this machine can't interfere.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_durable import Durable
from celery_durable.store import Store
from celery_durable.store.migrations import upgrade
from tests.support.leftovers import leave_nothing_behind
from tests.support.services import (
    BROKER,
    BROKER_URL,
    PG_URL,
    REDIS_URL,
    delete_queues,
    drop_tables,
    redis_client,
    unique,
)
from tests.support.workers import Worker

PREFIX = unique("t")[:9] + "_"
NAMESPACE = unique("ns-")
QUEUE = unique("q-")
OTHER_QUEUE = unique("oq-")
# The queue of the test app's routed steps (``@durable.step(queue=GPU_QUEUE)``).
GPU_QUEUE = unique("gpu-")
# The queue of the canvas app (tests/apps/canvas.py: a result backend, chains, chords).
CANVAS_QUEUE = unique("cq-")
# The queue of the limiters' app (tests/apps/limited.py).
LIMITED_QUEUE = unique("lq-")
# The queue of the updates' app (tests/apps/updates.py).
UPDATES_QUEUE = unique("uq-")
# The queue of the schedules' app (tests/apps/scheduled.py) and its Redis notes' prefix.
SCHEDULED_QUEUE = unique("sq-")

# The test app (tests/apps/basic.py) reads all of these, in this process and in workers.
os.environ.update(
    {
        "CELERY_DURABLE_DATABASE_URL": PG_URL,
        "CELERY_DURABLE_TABLE_PREFIX": PREFIX,
        "CELERY_DURABLE_NAMESPACE": NAMESPACE,
        "CELERY_DURABLE_LOCK_TIMEOUT": "3",
        "CELERY_DURABLE_POLL_INTERVAL": "0.2",
        "CELERY_DURABLE_DISPATCH_GRACE": "2",
        "CELERY_DURABLE_MAX_PENDING_SIGNALS": "5",
        "CELERY_DURABLE_MAX_RECOVERIES": "3",
        "TEST_BROKER_URL": BROKER_URL,
        "TEST_REDIS_URL": REDIS_URL,
        "TEST_QUEUE": QUEUE,
        "TEST_OTHER_QUEUE": OTHER_QUEUE,
        "TEST_GPU_QUEUE": GPU_QUEUE,
        "TEST_CANVAS_QUEUE": CANVAS_QUEUE,
        "TEST_LIMITED_QUEUE": LIMITED_QUEUE,
        "TEST_UPDATES_QUEUE": UPDATES_QUEUE,
        "TEST_SCHEDULED_QUEUE": SCHEDULED_QUEUE,
        "TEST_SCHEDULED_KEY": unique("scheduled-"),
    }
)


def pytest_report_header() -> str:
    return f"celery_durable tests: broker {BROKER} ({BROKER_URL}), store {PG_URL}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    parallel = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    for item in items:
        # Tests of the worker app touch the broker: `-m broker` selects them for the second
        # broker's pass of the README's test command.
        if "basic_app" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.broker)
        # A serial test counts the whole cluster's commits or changes a setting of the
        # shared broker: in a parallel run (pytest -n) it is skipped, for a run of its own.
        if parallel and item.get_closest_marker("serial"):
            item.add_marker(pytest.mark.skip(reason="serial: run it on its own (-m serial)"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    # A parallel run sends each report to the controller as UTF-8; tests that check lone
    # surrogates (which UTF-8 can't encode) log them in tracebacks, on purpose.
    report.sections = [
        (title, text.encode("utf-8", "backslashreplace").decode())
        for title, text in report.sections
    ]
    return report


@pytest.fixture(scope="session")
def basic_app() -> Iterator[object]:
    """The worker app module, its tables migrated on Postgres."""
    from tests.apps import basic

    basic.durable.migrate()
    yield basic
    basic.durable.runtime.store.dispose()
    drop_tables(PG_URL, PREFIX)
    queues = [QUEUE, OTHER_QUEUE, GPU_QUEUE, CANVAS_QUEUE, LIMITED_QUEUE, SCHEDULED_QUEUE]
    queues.append(UPDATES_QUEUE)
    queues.append(basic.durable.config.signal_queue)
    delete_queues(BROKER_URL, queues)


@contextmanager
def store_on(database: str, tmp_path: Path) -> Iterator[Store]:
    """A migrated store of its own (table prefix) on ``database``, dropped afterwards."""
    prefix = unique("s")[:9] + "_"
    url = PG_URL if database == "postgresql" else f"sqlite:///{tmp_path}/store.sqlite3"
    store = Store(url, prefix, "ns")
    upgrade(store)
    try:
        yield store
    finally:
        store.dispose()
        if database == "postgresql":
            drop_tables(PG_URL, prefix)


@pytest.fixture(params=["postgresql", "sqlite"])
def store(request, tmp_path) -> Iterator[Store]:  # type: ignore[no-untyped-def]
    """A store of its own on each database, for store-level tests."""
    with store_on(request.param, tmp_path) as store:
        yield store


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[Store]:
    """A store of its own on Postgres, for what only Postgres does."""
    with store_on("postgresql", tmp_path) as store:
        yield store


@pytest.fixture
def key() -> str:
    """A fresh key per test for run ids and Redis side-effect counters."""
    return unique("k")


@pytest.fixture(scope="session")
def rds():  # type: ignore[no-untyped-def]
    client = redis_client()
    yield client
    client.close()


class StartWorker:
    """``start_worker(...)``: start a worker of the test app (the session queue unless
    ``queues``) and wait until it is ready; ``start_worker.together(spec, ...)``: start
    several at once (each spec the keyword arguments of one), then wait for all of them."""

    def __init__(self) -> None:
        self.started: list[Worker] = []

    def spawn(
        self,
        name: str | None = None,
        env: dict[str, str] | None = None,
        concurrency: int = 2,
        app: str = "tests.apps.basic",
        queues: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> Worker:
        worker = Worker(
            app,
            env or {},
            queues=queues or (OTHER_QUEUE if app == "tests.apps.other" else QUEUE),
            # Node names are unique: a worker's pidbox queue is exclusive on RabbitMQ, and
            # a parallel run's other session starts workers too.
            name=unique(f"{name or 'w'}-"),
            concurrency=concurrency,
            extra=extra,
        )
        self.started.append(worker)
        return worker

    def __call__(self, *args: Any, **kwargs: Any) -> Worker:
        return self.spawn(*args, **kwargs).wait_ready()

    def together(self, *specs: dict[str, Any]) -> list[Worker]:
        workers = [self.spawn(**spec) for spec in specs]
        return [worker.wait_ready() for worker in workers]


@pytest.fixture
def start_worker(basic_app: Any, key: str) -> Iterator[StartWorker]:
    """Start workers of the test app; all are SIGKILLed at teardown, and what they left
    (messages in the session's queues, active runs, the test's ``block:`` keys) cleared
    for the next test (tests/support/leftovers.py)."""
    start = StartWorker()
    began = time.time()
    yield start
    for worker in start.started:
        worker.kill()
    if start.started:
        # ``key``: the test's own, when it asks for it (a fixture's value is one per test).
        leave_nothing_behind(basic_app.durable, began, [QUEUE, OTHER_QUEUE], key=key)


@contextmanager
def module_worker(queues: str, label: str) -> Iterator[Worker]:
    worker = Worker("tests.apps.basic", {}, queues=queues, name=unique(label))
    try:
        yield worker.wait_ready()
    finally:
        # SIGKILL as for a test's own workers: a warm shutdown only adds seconds at the end.
        worker.kill()


@pytest.fixture(scope="module")
def shared_worker(basic_app: object) -> Iterator[Worker]:
    """One worker for a whole module of tests that don't kill it."""
    with module_worker(QUEUE, "shared") as worker:
        yield worker


@pytest.fixture(scope="module")
def shared_gpu_worker(basic_app: object) -> Iterator[Worker]:
    """One worker of the routed steps' queue for a whole module of tests that don't kill it."""
    with module_worker(GPU_QUEUE, "shared-gpu") as worker:
        yield worker


@pytest.fixture(scope="session")
def canvas_app(basic_app: object) -> object:
    """The canvas app module (a Redis result backend), on the test app's tables."""
    from tests.apps import canvas

    return canvas


@pytest.fixture(scope="session")
def limited_app(basic_app: object) -> object:
    """The limiters' app module, on the test app's tables."""
    from tests.apps import limited

    return limited


@pytest.fixture(scope="session")
def streams_app(basic_app: object) -> object:
    """The streams' app module (tests.apps.basic and its streaming workflows)."""
    from tests.apps import streams

    return streams


@pytest.fixture(scope="session")
def agents_app(basic_app: object) -> object:
    """The Pydantic AI agents' app module (tests.apps.basic and the agents' workflows)."""
    from tests.apps import agents

    return agents


@pytest.fixture(scope="session")
def updates_app(basic_app: object) -> object:
    """The updates' app module, on the test app's tables."""
    from tests.apps import updates

    return updates


@pytest.fixture(scope="session")
def batched_app(basic_app: object) -> Iterator[object]:
    """The batched maps' app module, on the test app's tables; its queue deleted after."""
    from tests.apps import batched

    yield batched
    batched.durable.runtime.store.dispose()
    delete_queues(BROKER_URL, [batched.QUEUE])


@pytest.fixture(scope="session")
def scheduled_app(basic_app: object) -> object:
    """The schedules' app module, on the test app's tables."""
    from tests.apps import scheduled

    return scheduled


@pytest.fixture(scope="module")
def canvas_worker(canvas_app: object) -> Iterator[Worker]:
    """One worker of the canvas app for a whole module of tests that don't kill it."""
    worker = Worker("tests.apps.canvas", {}, queues=CANVAS_QUEUE, name=unique("canvas"))
    try:
        yield worker.wait_ready()
    finally:
        worker.kill()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One Chromium for a test process's whole session: Playwright's sync API runs one
    instance per thread, so every browser test of the process shares it."""
    from tests.support.dashboard import chromium  # noqa: PLC0415 - only browser tests need it

    with chromium() as launched:
        yield launched


@pytest.fixture
def flower(basic_app: object) -> Iterator[object]:
    """A real Flower on the test app's broker (basic auth ops:s3cret)."""
    from tests.support.flower import Flower

    process = Flower("tests.apps.basic").wait_ready()
    yield process
    process.stop()


@pytest.fixture
def durable(tmp_path, monkeypatch) -> Iterator[Durable]:  # type: ignore[no-untyped-def]
    """The embedded default in-process: a SQLite store and Celery in eager mode."""
    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    app = Celery("embedded", broker="memory://")
    app.conf.task_always_eager = True
    instance = Durable(app, database_url=f"sqlite:///{tmp_path}/store.sqlite3")
    instance.migrate()
    yield instance
    instance.runtime.store.dispose()
