"""The app that tests/extras_check.py runs from a fresh venv holding only the package and
one documented extra: no test dependency, nothing from this repository but the package.

Configured from the environment (``CELERY_BROKER_URL``, ``CELERY_DURABLE_*``,
``EXTRAS_QUEUE``). ``python extras_app.py`` starts one workflow, waits for its result
and prints it; the worker is ``celery -A extras_app worker``. ``python extras_app.py
features`` uses the dashboard, metrics and tracing extras once.
"""

from __future__ import annotations

import os
import sys

from celery import Celery

import celery_durable as cd
from celery_durable import Durable

app = Celery("extras_app", broker=os.environ["CELERY_BROKER_URL"])
app.conf.task_default_queue = os.environ["EXTRAS_QUEUE"]
durable = Durable(app)


@durable.step
def reserve(order_id: int) -> dict:
    return {"order": order_id, "amount": 1999}


@durable.step
def charge(order_id: int, amount: int) -> str:
    return f"receipt-{order_id}-{amount}"


@durable.workflow
def checkout(order_id: int) -> dict:
    item = reserve(order_id)
    cd.sleep(0.5)  # a durable timer: the sweeper and a second delivery take part
    return {"receipt": charge(order_id, item["amount"])}


def features() -> str:
    """The dashboard, metrics and tracing extras: each feature's imports, used once (no
    worker needed: the store is all they read)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from celery_durable.core import tracing
    from celery_durable.ops.metrics import DurableCollector

    durable.migrate()
    page = durable.dashboard_app().test_client().get("/")
    if page.status_code != 200:
        raise SystemExit(f"the dashboard answered {page.status}")
    durable.dashboard_app(asgi=True)  # a2wsgi
    from celery_durable.ops.dashboard.serve import make_dashboard_server

    make_dashboard_server(durable, "127.0.0.1", 0).server_close()  # waitress
    registry = CollectorRegistry()
    registry.register(DurableCollector([durable]))
    if b"celery_durable_runs" not in generate_latest(registry):
        raise SystemExit("the metrics have no celery_durable_runs")
    if not tracing.ENABLED:
        raise SystemExit("tracing found no opentelemetry")
    return "dashboard, metrics and tracing work"


if __name__ == "__main__":
    if sys.argv[1:] == ["features"]:
        print(features())
    else:
        handle = checkout.delay(42)
        print(f"result: {handle.get(timeout=90)}")
