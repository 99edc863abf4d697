"""`celery -A app durable metrics`: a real endpoint subprocess, scraped after real workflows
ran on real workers. Every figure comes from the database, so the deltas between two
scrapes are exactly what the runs did, whichever worker process did it."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from celery_durable import WorkflowStatus
from tests.support.flower import free_port
from tests.support.services import BROKER_URL, delete_queues, unique
from tests.support.waiting import wait_until
from tests.support.workers import CeleryProcess

Scrape = Callable[[], dict[tuple[str, frozenset[tuple[str, str]]], float]]


@pytest.fixture(scope="module")
def scrape(basic_app: Any) -> Iterator[Scrape]:
    port = free_port()
    command = ["durable", "metrics", f"--port={port}", "--address=127.0.0.1", "--interval=0"]
    endpoint = CeleryProcess("tests.apps.basic", command, {}, "metrics")

    def read() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def up() -> bool:
        if endpoint.proc.poll() is not None:
            raise AssertionError(f"the metrics command exited:\n{endpoint.log()}")
        try:
            return bool(read())
        except OSError:
            return False

    wait_until(up, 60, 0.1, lambda: f"the metrics endpoint; log:\n{endpoint.log()}")
    yield read
    endpoint.stop()


def value(figures: dict, name: str, **labels: str) -> float:
    """The sample ``name`` whose labels include ``labels`` (0 if there is none)."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in figures.items() if n == name and wanted <= have)


def shown(figures: dict, name: str, **labels: str) -> bool:
    wanted = set(labels.items())
    return any(n == name and wanted <= have for (n, have) in figures)


def test_counters_and_histograms_count_what_real_runs_did(basic_app, start_worker, scrape, key):
    start_worker()
    five, permanent, booking = (
        basic_app.five_steps.name,
        basic_app.permanent.name,
        basic_app.booking.name,
    )
    before = scrape()
    assert value(before, "celery_durable_metrics_up") == 1

    basic_app.five_steps.delay(key).get(timeout=30)
    failed = basic_app.permanent.delay(key)
    assert failed.wait(timeout=30) is WorkflowStatus.FAILED
    approved = basic_app.booking.delay(key, 60)
    wait_until(lambda: approved.status() is WorkflowStatus.WAITING, 30, message="WAITING")
    approved.signal("approval", {"by": "alice"})
    assert approved.get(timeout=30)["status"] == "confirmed"
    after = scrape()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("celery_durable_runs_started_total", workflow=five) == 1
    assert delta("celery_durable_runs_succeeded_total", workflow=five) == 1
    assert delta("celery_durable_runs_failed_total", workflow=permanent) == 1
    assert delta("celery_durable_runs_succeeded_total", workflow=booking) == 1
    assert value(after, "celery_durable_runs", workflow=five, status="SUCCEEDED") >= 1
    # five_steps records 5 numbered steps, booking 2 (its wait, a durable sleep, is left
    # out; the step after it is timed by its worker like any other): 7 step durations.
    numbered = "tests.apps.basic.numbered"
    assert delta("celery_durable_step_duration_seconds_count", step=numbered) == 7
    assert delta("celery_durable_step_duration_seconds_bucket", step=numbered, le="+Inf") == 7
    assert delta("celery_durable_step_duration_seconds_sum", step=numbered) > 0
    assert delta("celery_durable_signal_resume_latency_seconds_count", signal="approval") == 1
    assert (
        value(after, "celery_durable_step_duration_seconds_count", step="celery_durable.sleep") == 0
    )


def test_gauges_show_waiting_pending_and_expired_runs_and_recoveries(
    basic_app, start_worker, scrape, key, rds
):
    collector, one_attempt = basic_app.collector.name, basic_app.one_attempt.name
    worker = start_worker()
    waiting = basic_app.collector.delay(key, 1)
    wait_until(lambda: waiting.status() is WorkflowStatus.WAITING, 30, message="WAITING")
    nobody = unique("nobody-")
    stuck = basic_app.five_steps.apply_async(args=(f"{key}-p",), queue=nobody)
    figures = scrape()
    assert value(figures, "celery_durable_runs", workflow=collector, status="WAITING") >= 1
    assert shown(figures, "celery_durable_oldest_waiting_age_seconds", workflow=collector)
    # The run on a queue no worker consumes is startable and waits: it has a pending age.
    five = basic_app.five_steps.name
    assert shown(figures, "celery_durable_oldest_pending_age_seconds", workflow=five)

    # A worker lost mid-step: its lease expires (a gauge), then another worker recovers
    # the run (a counter).
    before = scrape()
    lost_key = f"{key}-lost"
    rds.set(f"block:{lost_key}:s1", "1")
    lost = basic_app.one_attempt.delay(lost_key)
    wait_until(lambda: rds.get(f"started:{lost_key}:s1"), 30, message="step 1 to start")
    worker.kill()

    def expired() -> bool:
        figures = scrape()
        return (
            value(figures, "celery_durable_expired_leases", workflow=one_attempt) >= 1
            and value(figures, "celery_durable_due_backlog", workflow=one_attempt, status="RUNNING")
            >= 1
        )

    wait_until(
        expired,
        30,
        0.2,
        lambda: (
            f"the lost worker's lease to show as expired: {lost.record()} "
            f"{[(k, v) for k, v in scrape().items() if ('workflow', one_attempt) in k[1]]}"
        ),
    )
    rds.delete(f"block:{lost_key}:s1")
    start_worker()
    assert lost.get(timeout=60) == [10, 20, 30]
    after = scrape()
    recovered = "celery_durable_runs_recovered_total"
    assert (
        value(after, recovered, workflow=one_attempt)
        - value(before, recovered, workflow=one_attempt)
        == 1
    )
    assert value(after, "celery_durable_expired_leases", workflow=one_attempt) == 0
    for handle in (waiting, stuck):
        handle.cancel("test over")
    delete_queues(BROKER_URL, [nobody])


def test_the_same_figures_on_the_embedded_sqlite_store(durable):
    import celery_durable as cd
    from celery_durable.store.metrics import StoreMetrics

    @durable.step(name="double")
    def double(n: int) -> int:
        return 2 * n

    @durable.workflow
    def flow(n: int) -> int:
        first = double(n)
        cd.wait_for_signal("go")
        return double(first) + double(1) + sum(cd.map(double, [1, 2]))

    handle = flow.delay(3)
    handle.signal("go")
    assert handle.get(timeout=10) == 20
    metrics = StoreMetrics(durable.runtime.store)
    figures = {(f.workflow, f.status): f for f in metrics.run_figures()}
    assert figures[(flow.name, "SUCCEEDED")].runs == 1
    assert figures[(flow.name, "SUCCEEDED")].started == 1
    (steps,) = metrics.step_durations()
    # Three "double" records, each timed by its worker; the wait is left out.
    assert (steps.label, steps.count) == ("double", 3) and steps.buckets[-1] == 3
    (signals,) = metrics.signal_latencies()
    assert (signals.label, signals.count) == ("go", 1)
    # The map's two items: counted by step and status, timed from dispatch to record.
    assert metrics.item_figures() == [("double", "ok", 2)]
    (items,) = metrics.item_durations()
    assert (items.label, items.count) == ("double", 2)


def listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} gives them) of sockets listening
    on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                local, state = row.split()[1], row.split()[3]
                address, _, hex_port = local.partition(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.add(address)
    return found


def test_the_endpoint_listens_on_loopback_unless_told_otherwise(basic_app):
    """Bug: it listened on 0.0.0.0, every interface, by default."""
    port = free_port()
    endpoint = CeleryProcess("tests.apps.basic", ["durable", "metrics", f"--port={port}"], {}, "m")
    try:
        wait_until(lambda: listening_addresses(port), 60, 0.1, lambda: endpoint.log())
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, little-endian hex
        assert f"on http://127.0.0.1:{port}/metrics" in endpoint.log()
    finally:
        endpoint.stop()
