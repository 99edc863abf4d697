"""A second app on the same database and namespace as tests.apps.basic, with its own
workflows and queue: the two must never dispatch each other's runs."""

from __future__ import annotations

import os

from celery import Celery

from celery_durable import Durable

app = Celery("other", broker=os.environ.get("TEST_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_default_queue=os.environ.get("TEST_OTHER_QUEUE", "other"),
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)
durable = Durable(app)  # the same CELERY_DURABLE_* settings as tests.apps.basic


@durable.workflow(name="tests.apps.other.greet")
def greet(name: str) -> str:
    return f"hello {name}"
