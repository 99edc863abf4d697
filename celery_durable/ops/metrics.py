"""The Prometheus endpoint of ``celery -A app durable metrics --port 9808``.

Needs the ``metrics`` extra (``pip install "celery-durable[metrics]"``: prometheus_client 0.20
or later, whose ``start_http_server`` returns the server it starts). Every figure is read from
the database (``celery_durable.store.metrics``), so one endpoint serves a whole fleet,
prefork children included, and survives restarts of the workers:

- gauges: ``celery_durable_runs{workflow,status}``, ``..._oldest_pending_age_seconds``,
  ``..._oldest_waiting_age_seconds``, ``..._due_backlog{workflow,status}``,
  ``..._expired_leases``;
- counters: ``celery_durable_runs_started_total``, ``..._succeeded_total``,
  ``..._failed_total``, ``..._recovered_total`` (per workflow);
- gauges of fan-outs: ``celery_durable_items{step,status}``;
- gauges of limiters: ``celery_durable_limiter_in_use{limiter,key}``, ``..._waiting``,
  ``..._wait_seconds`` (the oldest waiter's wait);
- gauges of schedules: ``celery_durable_schedule_lag_seconds{schedule}``, how late each
  schedule's last started slot fired (none until one has), and any other gauge a wing
  registers (``ops.wing_parts.MetricsGauge``);
- histograms: ``celery_durable_step_duration_seconds{step}``,
  ``celery_durable_item_duration_seconds{step}``,
  ``celery_durable_signal_resume_latency_seconds{signal}``.

Counters and histograms are counts of rows; rows deleted later (a garbage collection of
finished runs) are never subtracted, so they only go up while this process runs.

Example::

    serve(durables_of(app), port=9808, address="127.0.0.1", interval=15.0)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from celery_durable.engine.runtime import runtime_of
from celery_durable.ops.wing_parts import WING_PARTS, MetricsGauge
from celery_durable.runs.stored_runs import limiter_usage
from celery_durable.store.areas import LimiterFigures
from celery_durable.store.db.outage import describe, summary
from celery_durable.store.metrics import Histogram, RunFigures, StoreMetrics

if TYPE_CHECKING:
    from celery_durable.engine.runtime import HasRuntime, Runtime

logger = logging.getLogger("celery_durable.metrics")

PREFIX = "celery_durable"
COUNTED = {"SUCCEEDED": "succeeded", "FAILED": "failed"}


class Monotonic:
    """Counter values that never go down: each read adds only what grew since the last."""

    def __init__(self) -> None:
        self._seen: dict[tuple[Any, ...], float] = {}
        self._total: dict[tuple[Any, ...], float] = {}

    def __call__(self, key: tuple[Any, ...], value: float) -> float:
        last = self._seen.get(key)
        self._seen[key] = value
        if last is None:
            self._total[key] = value
        else:
            self._total[key] += max(0.0, value - last)
        return self._total[key]


class DurableCollector:
    """A prometheus_client collector over the store of each Durable (one per namespace).

    Reads are cached for ``interval`` seconds: several scrapers cost one pass.
    """

    def __init__(self, durables: Sequence[Runtime | HasRuntime], interval: float = 15.0) -> None:
        runtimes = [runtime_of(durable) for durable in durables]
        self.readers = [(r.config.namespace, StoreMetrics(r.store), r) for r in runtimes]
        self.interval = interval
        self.monotonic = Monotonic()
        self._lock = threading.Lock()
        self._cached: list[Metric] = []
        self._read_at = -float("inf")

    def describe(self) -> list[Metric]:
        return []  # no metric is known before the first read: don't read at registration

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if time.monotonic() - self._read_at >= self.interval:
                self._cached = self._read()
                self._read_at = time.monotonic()
            yield from self._cached

    def _read(self) -> list[Metric]:
        up = GaugeMetricFamily(
            f"{PREFIX}_metrics_up", "1 if the last read of the store worked", labels=["namespace"]
        )
        families: dict[str, Metric] = {}
        for namespace, reader, runtime in self.readers:
            try:
                runs = reader.run_figures()
                steps = reader.step_durations()
                items = reader.item_figures()
                item_durations = reader.item_durations()
                signals = reader.signal_latencies()
                limiters = limiter_usage(runtime)
                gauged = [(gauge, list(gauge.read(runtime))) for gauge in WING_PARTS.gauges]
            except Exception as exc:  # noqa: BLE001 - the endpoint stays up, says it
                logger.error(
                    "reading metrics of namespace %r from %s failed: %s",
                    namespace,
                    describe(runtime.store.url),
                    summary(exc),
                )
                up.add_metric([namespace], 0)
                continue
            up.add_metric([namespace], 1)
            self._runs(families, namespace, runs)
            self._histogram(families, "step_duration_seconds", "step", namespace, steps)
            gauge = self._family(
                families, GaugeMetricFamily, "items", "Items of fan-outs", ["step", "status"]
            )
            for step, status, count in items:
                gauge.add_metric([namespace, step, status], count)
            self._histogram(
                families, "item_duration_seconds", "step", namespace, item_durations, "item"
            )
            self._histogram(families, "signal_resume_latency_seconds", "signal", namespace, signals)
            self._limiters(families, namespace, limiters)
            for gauge, values in gauged:
                self._gauge(families, namespace, gauge, values)
        return [up, *families.values()]

    def _limiters(
        self, families: dict[str, Metric], namespace: str, usages: Sequence[LimiterFigures]
    ) -> None:
        labels = ["limiter", "key"]
        in_use = self._family(families, GaugeMetricFamily, "limiter_in_use", "Slots held", labels)
        waiting = self._family(
            families, GaugeMetricFamily, "limiter_waiting", "Runs waiting for a slot", labels
        )
        waited = self._family(
            families,
            GaugeMetricFamily,
            "limiter_wait_seconds",
            "How long the oldest waiter has waited",
            labels,
        )
        for usage in usages:
            key = [namespace, usage.limiter, usage.key]
            in_use.add_metric(key, usage.in_use)
            waiting.add_metric(key, usage.waiting)
            waited.add_metric(key, usage.oldest_wait or 0.0)

    def _gauge(
        self,
        families: dict[str, Metric],
        namespace: str,
        gauge: MetricsGauge,
        values: list[tuple[tuple[str, ...], float]],
    ) -> None:
        family = self._family(families, GaugeMetricFamily, gauge.name, gauge.text, [*gauge.labels])
        for labels, value in values:
            family.add_metric([namespace, *labels], value)

    def _family(
        self, families: dict[str, Metric], kind: type, name: str, text: str, labels: list[str]
    ) -> Any:
        if name not in families:
            families[name] = kind(f"{PREFIX}_{name}", text, labels=["namespace", *labels])
        return families[name]

    def _runs(self, families: dict[str, Metric], namespace: str, figures: list[RunFigures]) -> None:
        gauge, counter = GaugeMetricFamily, CounterMetricFamily
        runs = self._family(families, gauge, "runs", "Runs in the store", ["workflow", "status"])
        backlog = self._family(
            families, gauge, "due_backlog", "Runs past their due time", ["workflow", "status"]
        )
        totals: dict[tuple[str, str], float] = {}
        ages: dict[tuple[str, str], float] = {}
        for f in figures:
            runs.add_metric([namespace, f.workflow, f.status], f.runs)
            backlog.add_metric([namespace, f.workflow, f.status], f.due)
            for what, value in (
                ("started", f.started),
                ("recovered", f.recoveries),
                ("expired", f.expired),
                (COUNTED.get(f.status, ""), f.runs),
            ):
                if what:
                    totals[(what, f.workflow)] = totals.get((what, f.workflow), 0) + value
            for what, age in (("pending", f.pending_age), ("waiting", f.waiting_age)):
                if age is not None:
                    ages[(what, f.workflow)] = max(ages.get((what, f.workflow), 0.0), age)
        expired = self._family(
            families, gauge, "expired_leases", "Running runs whose lease expired", ["workflow"]
        )
        for what, meaning in (
            ("started", "Runs claimed by a worker at least once"),
            ("succeeded", "Runs that succeeded"),
            ("failed", "Runs that failed for good"),
            ("recovered", "Times a run's worker was lost and the run resumed elsewhere"),
        ):
            family = self._family(families, counter, f"runs_{what}", meaning, ["workflow"])
            for workflow in sorted({w for (kind, w) in totals if kind == what}):
                total = self.monotonic((namespace, what, workflow), totals[(what, workflow)])
                family.add_metric([namespace, workflow], total)
        for workflow in sorted({w for (kind, w) in totals if kind == "expired"}):
            expired.add_metric([namespace, workflow], totals[("expired", workflow)])
        for what, meaning in (
            ("pending", "Seconds the oldest startable pending run has waited to start"),
            ("waiting", "Seconds the oldest waiting run has waited (signal, timer)"),
        ):
            family = self._family(
                families, gauge, f"oldest_{what}_age_seconds", meaning, ["workflow"]
            )
            for (kind, workflow), age in sorted(ages.items()):
                if kind == what:
                    family.add_metric([namespace, workflow], age)

    def _histogram(
        self,
        families: dict[str, Metric],
        name: str,
        label: str,
        namespace: str,
        histograms: list[Histogram],
        what: str | None = None,
    ) -> None:
        meaning = {
            "step": "Seconds a step took in its worker (its in-process retries included)",
            "item": "Seconds from a fan-out's dispatch to its item's record (queueing included)",
            "signal": "Seconds from a signal's storing to its consumption by the woken run",
        }[what or label]
        family = self._family(families, HistogramMetricFamily, name, meaning, [label])
        for h in histograms:
            key = (namespace, name, h.label)
            buckets = [
                (_bound(bound), self.monotonic((*key, bound), count))
                for bound, count in zip(h.bounds, h.buckets, strict=True)
            ]
            count = self.monotonic((*key, "count"), h.count)
            buckets.append(("+Inf", count))
            total = self.monotonic((*key, "sum"), h.total)
            family.add_metric([namespace, h.label], buckets, total)


def _bound(value: float) -> str:
    return repr(float(value))


def serve(
    durables: Sequence[Runtime | HasRuntime], port: int, address: str, interval: float
) -> Any:
    """Serve the metrics of ``durables`` on ``address:port`` (a daemon thread); returns the
    server, whose ``shutdown()`` stops it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DurableCollector(durables, interval))  # type: ignore[arg-type]
    server, _thread = start_http_server(port, addr=address, registry=registry)
    return server


def serve_forever(
    durables: Sequence[Runtime | HasRuntime], port: int, address: str, interval: float
) -> None:
    """What the command does: serve until interrupted (SIGINT; SIGTERM ends the process)."""
    server = serve(durables, port, address, interval)
    logger.warning("serving celery_durable metrics on http://%s:%d/metrics", address, port)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
