"""Watching runs on the embedded default: the dashboard mounted in a web app of your own,
the Prometheus endpoint, OpenTelemetry traces and JSON log lines.

Run it (no server needed)::

    python examples/observe.py

It starts a worker (JSON logs on, tracing set up in each pool process), starts two orders
(the second fails: over the card limit) inside a web request's span, then reads what an
operator would: the dashboard mounted at /durable of a Flask site, a scrape of
``celery -A observe durable metrics``, the spans of the first order's trace and the
worker's JSON log lines.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

# --8<-- [start:mount-imports]
import flask
import werkzeug.middleware.dispatcher

# --8<-- [end:mount-imports]
from celery import Celery

# --8<-- [start:tracing-imports]
from celery.signals import worker_process_init
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

# --8<-- [end:tracing-imports]
from scratch import data_dir, file_broker, worker

import celery_durable as cd
from celery_durable import Durable, WorkflowFailed

DATA = data_dir("OBSERVE_DIR", driver=__name__ == "__main__")
SPANS = DATA / "spans.jsonl"
WORKER_LOG = DATA / "worker.log"
HERE = Path(__file__).parent

app = Celery("observe", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


@durable.step
def reserve(order_id: int) -> int:
    return 1000 * order_id  # the amount


@durable.step
def charge(order_id: int, amount: int) -> str:
    if amount > 2000:  # no retry can help: fail the run at once
        raise cd.PermanentError(f"amount {amount} is over the card limit of 2000")
    return f"receipt-{order_id}-{amount}"


@durable.workflow
def checkout(order_id: int) -> str:
    return charge(order_id, reserve(order_id))


# --8<-- [start:tracing]
def set_up_tracing(service: str) -> None:
    """Send every span to a file, one JSON line each (in production: an OTLP exporter
    behind a BatchSpanProcessor)."""
    exporter = ConsoleSpanExporter(
        out=SPANS.open("a"), formatter=lambda span: span.to_json(indent=None) + "\n"
    )
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


@worker_process_init.connect
def trace_each_pool_process(**_: Any) -> None:
    # In each prefork child, after the fork: an exporter's thread does not survive it.
    set_up_tracing("shop-worker")


# --8<-- [end:tracing]


# --8<-- [start:mount]
site = flask.Flask("shop")


@site.get("/")
def home() -> str:
    return "the shop"


board = durable.dashboard_app(basic_auth="ops:s3cret", allowed_hosts="shop.example.com")
site.wsgi_app = werkzeug.middleware.dispatcher.DispatcherMiddleware(
    site.wsgi_app, {"/durable": board}
)
# --8<-- [end:mount]


def show_dashboard() -> None:
    client = site.test_client()
    login = {"Authorization": "Basic " + base64.b64encode(b"ops:s3cret").decode()}
    page = client.get("/durable/", headers={"Host": "shop.example.com", **login})
    listed = [run for run in ("order-1", "order-2") if f"/durable/run/{run}" in page.text]
    print(f"GET /durable/ as ops: {page.status_code}, lists {listed}")
    anonymous = client.get("/durable/", headers={"Host": "shop.example.com"})
    print(f"GET /durable/ without a password: {anonymous.status_code}")
    rebound = client.get("/durable/", headers={"Host": "evil.example", **login})
    print(f"GET /durable/ with Host evil.example: {rebound.status_code}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape_metrics() -> None:
    port = free_port()
    endpoint = subprocess.Popen(
        [sys.executable, "-m", "celery", "--quiet", "-A", "observe", "durable", "metrics"]
        + [f"--port={port}", "--interval=0"],
        cwd=HERE,
        env={**os.environ, "OBSERVE_DIR": str(DATA)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        text = until(lambda: read(f"http://127.0.0.1:{port}/metrics"), "the metrics endpoint")
    finally:
        endpoint.terminate()
        endpoint.wait(30)
    wanted = ("celery_durable_runs{", "celery_durable_runs_failed_total{")
    for line in text.splitlines():
        if line.startswith(wanted):
            print(f"metric {line}")


def read(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return None


def until(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def show_trace(trace_id: str) -> None:
    spans = [json.loads(line) for line in SPANS.read_text().splitlines() if line.strip()]
    mine = sorted(
        (s for s in spans if s["context"]["trace_id"] == trace_id), key=lambda s: s["start_time"]
    )
    names = {s["context"]["span_id"]: s["name"] for s in mine}
    for span in mine:
        parent = names.get(span["parent_id"] or "", "none")
        outcome = span["attributes"].get("celery_durable.outcome")
        print(
            f"span {span['name']} (parent: {parent})" + (f" outcome={outcome}" if outcome else "")
        )


def show_logs(run_id: str) -> None:
    for line in WORKER_LOG.read_text().splitlines():
        if line.startswith("{") and json.loads(line)["run_id"] == run_id:
            entry = json.loads(line)
            print(f"log {entry['level']} {entry['logger']}: {entry['message']}")


def main() -> None:
    durable.migrate()
    set_up_tracing("shop-web")
    options = ["-c", "1", "--loglevel=INFO"]
    with worker(
        "observe",
        "OBSERVE_DIR",
        DATA,
        *options,
        env={"CELERY_DURABLE_LOG_JSON": "1"},
        stdout=subprocess.DEVNULL,
        stderr=WORKER_LOG.open("w"),  # its JSON lines, and Celery's own text lines
    ):
        with trace.get_tracer("shop").start_as_current_span("POST /checkout") as request:
            first = checkout.apply_async((1,), run_id="order-1")
            second = checkout.apply_async((3,), run_id="order-2")
        print(f"order-1: {first.get(timeout=60)}")
        try:
            second.get(timeout=60)
        except WorkflowFailed as exc:
            print(f"order-2 failed: {exc.error_type}: {exc.error_message}")
    show_dashboard()
    scrape_metrics()
    show_trace(f"0x{request.get_span_context().trace_id:032x}")
    show_logs("order-1")


if __name__ == "__main__":
    main()
