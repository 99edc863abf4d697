"""examples/observe.py, shown on the dashboard and observability pages, works as written:
the dashboard mounted in a Flask site, the metrics command, traces and JSON log lines."""

from __future__ import annotations

from tests.support.examples import run_example


def test_observe_example_mounts_the_dashboard_scrapes_metrics_traces_and_logs(tmp_path):
    printed = run_example("observe.py", tmp_path)
    lines = printed.splitlines()
    assert "order-1: receipt-1-1000" in lines
    assert (
        "order-2 failed: celery_durable.errors.PermanentError: "
        "amount 3000 is over the card limit of 2000"
    ) in lines
    # Mounted at /durable: both runs listed; no password 401; a foreign Host 400.
    assert "GET /durable/ as ops: 200, lists ['order-1', 'order-2']" in lines
    assert "GET /durable/ without a password: 401" in lines
    assert "GET /durable/ with Host evil.example: 400" in lines
    labels = 'namespace="default",status="{}",workflow="observe.checkout"'
    assert f"metric celery_durable_runs{{{labels.format('FAILED')}}} 1.0" in lines
    assert f"metric celery_durable_runs{{{labels.format('SUCCEEDED')}}} 1.0" in lines
    failed = (
        'metric celery_durable_runs_failed_total{namespace="default",workflow="observe.checkout"}'
    )
    assert f"{failed} 1.0" in lines
    # One trace from the web request: each run's delivery a child of it, its steps below.
    spans = [line for line in lines if line.startswith("span ")]
    assert spans[0] == "span POST /checkout (parent: none)"
    assert sorted(spans[1:]) == sorted(
        [
            "span observe.checkout (parent: POST /checkout) outcome=succeeded",
            "span observe.checkout (parent: POST /checkout) outcome=failed",
            *["span observe.reserve (parent: observe.checkout)"] * 2,
            *["span observe.charge (parent: observe.checkout)"] * 2,
        ]
    )
    logs = [line for line in lines if line.startswith("log ")]
    assert (
        "log INFO celery_durable.workflow: workflow observe.checkout run order-1 claimed: "
        "attempt 1 of 3, 0 recorded step(s) to replay"
    ) in logs
    assert (
        "log INFO celery_durable.workflow: workflow observe.checkout run order-1 succeeded" in logs
    )
