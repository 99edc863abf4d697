"""docs/reference/metrics.md lists every metric the Prometheus endpoint serves, with its
type and labels: the names come from a real collector over a store on SQLite, so a new
metric without a line in the reference (or a line for a metric that is gone) fails."""

from __future__ import annotations

import re
from pathlib import Path

from celery_durable import Durable
from celery_durable.ops.metrics import DurableCollector

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "reference" / "metrics.md"
# | `celery_durable_runs` | gauge | `namespace`, `workflow`, `status` | meaning |
ROW = re.compile(r"^\| `(celery_durable_\w+)` \| (\w+) \| ([^|]*) \|", re.MULTILINE)


def served(durable: Durable) -> dict[str, tuple[str, list[str]]]:
    """Each metric the endpoint serves: name (a counter's with ``_total``, as scraped),
    type and label names. Every family is yielded even before any run exists."""
    found = {}
    for family in DurableCollector([durable], interval=0).collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        found[name] = (family.type, list(family._labelnames))  # noqa: SLF001
    return found


def documented() -> dict[str, tuple[str, list[str]]]:
    return {
        name: (kind, re.findall(r"`(\w+)`", labels))
        for name, kind, labels in ROW.findall(REFERENCE.read_text())
    }


def test_every_metric_is_in_the_reference_with_its_type_and_labels(durable: Durable) -> None:
    metrics = served(durable)
    assert len(metrics) >= 18  # the collector yielded its families, not an empty read
    assert "celery_durable_runs_started_total" in metrics
    rows = documented()
    missing = sorted(set(metrics) - set(rows))
    assert not missing, f"metrics missing from {REFERENCE.name}: {missing}"
    gone = sorted(set(rows) - set(metrics))
    assert not gone, f"{REFERENCE.name} lists metrics the endpoint does not serve: {gone}"
    for name, (kind, labels) in metrics.items():
        assert rows[name] == (kind, labels), (name, rows[name], (kind, labels))
