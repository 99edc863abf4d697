"""A second app like tests/apps/basic.py on another broker: the same database, namespace
and workflow names, a queue of its own. The test process starts runs through it; a worker
of tests.apps.basic given its broker and queue (``twin_worker_env``) runs them.

Example::

    with twin_app(AMQP_URL, "q-twin", [basic.sleeper]) as twin:
        twin.workflows[basic.sleeper.name].delay(key, 1.0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from celery import Celery

from celery_durable import Durable


@dataclasses.dataclass
class Twin:
    app: Celery
    durable: Durable
    workflows: dict[str, Any]


def twin_worker_env(broker_url: str, queue: str) -> dict[str, str]:
    """The environment of a worker of tests.apps.basic on ``broker_url`` and ``queue``."""
    return {"TEST_BROKER_URL": broker_url, "TEST_QUEUE": queue}


@contextmanager
def twin_app(broker_url: str, queue: str, workflows: Sequence[Any]) -> Iterator[Twin]:
    """An app named as tests.apps.basic's, on ``broker_url`` with ``queue`` as its default
    queue, registering ``workflows`` (tasks of tests.apps.basic) under the same names and
    bodies; the CELERY_DURABLE_* settings of the session (conftest)."""
    app = Celery("basic", broker=broker_url, set_as_current=False)
    app.conf.update(task_default_queue=queue, broker_connection_retry_on_startup=True)
    durable = Durable(app)
    registered = {
        task.name: durable.workflow(name=task.name)(task.definition.fn) for task in workflows
    }
    try:
        yield Twin(app, durable, registered)
    finally:
        durable.runtime.store.dispose()
        app.close()
