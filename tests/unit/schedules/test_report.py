"""What operators see and do of schedules (schedules/report.py), on the embedded default:
``durable schedules`` (table and JSON) with its statuses, and pause, resume, trigger and
backfill from the command line, each with ``--json``; the dashboard's schedules page and
its pause, resume and trigger (CSRF required); the Prometheus lag gauge."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from celery_durable.ops import console
from tests.support.cli import invoke
from tests.support.schedules import fire_at, next_slot, runs_of, slot_outcomes
from tests.support.waiting import wait_until


def test_the_schedules_command_lists_pauses_resumes_triggers_and_backfills(durable):
    from celery_durable import wait_for_signal

    @durable.workflow
    def slow() -> None:
        wait_for_signal("go", timeout=3600)

    durable.schedule(slow, every=60, name="every-minute")
    due = next_slot(durable, "every-minute")
    fire_at(durable, due + 1)
    fire_at(durable, due + 61)  # its run still waits: this slot is skipped
    [listed] = [json.loads(line) for line in invoke(durable, "schedules", "--json").splitlines()]
    assert listed["name"] == "every-minute" and listed["status"] == "skipping"
    assert listed["skipped"] == 1 and listed["timing"] == "every 1m"
    assert listed["last_run_id"] == runs_of(durable.runtime.store, "every-minute")[0].run_id
    table = invoke(durable, "schedules")
    assert "every-minute" in table and "skipping" in table and "SKIPPED" in table

    assert json.loads(invoke(durable, "schedules", "pause", "every-minute", "--json")) == {
        "schedule": "every-minute",
        "paused": True,
    }
    assert fire_at(durable, due + 3600) == 0  # paused: nothing fires
    assert "paused" in invoke(durable, "schedules")
    invoke(durable, "schedules", "resume", "every-minute")

    triggered = json.loads(invoke(durable, "schedules", "trigger", "every-minute", "--json"))
    assert triggered["run_id"].startswith("schedule:every-minute:manual:")
    start = "2026-01-01T00:00:00Z"
    filled = invoke(
        durable,
        "schedules",
        "backfill",
        "every-minute",
        "--from",
        start,
        "--to",
        "2026-01-01T00:03:00Z",
        "--json",
    )
    assert len(json.loads(filled)["run_ids"]) == 4  # 00:00, 00:01, 00:02, 00:03
    again = invoke(
        durable,
        "schedules",
        "backfill",
        "every-minute",
        "--from",
        start,
        "--to",
        "2026-01-01T00:03:00Z",
        "--json",
    )
    assert json.loads(again)["run_ids"] == []
    outcomes = slot_outcomes(durable.runtime.store, "every-minute")
    assert outcomes == {"started": 1, "skipped": 1, "triggered": 1, "backfilled": 4}


def test_an_unknown_schedule_is_named(durable):
    import types

    from click.testing import CliRunner

    from celery_durable.cli import durable as durable_group

    done = CliRunner().invoke(
        durable_group,
        ["schedules", "pause", "nope"],
        obj=types.SimpleNamespace(app=durable.app),
    )
    assert done.exit_code == 1 and "no schedule named 'nope'" in done.output


def a_skipping_schedule(durable: Any) -> tuple[float, str]:
    """ "every-minute": its first slot fired 1 s late and still waits; the next was skipped.
    Returns that first slot and its run's id."""
    from celery_durable import wait_for_signal

    @durable.workflow
    def slow() -> None:
        wait_for_signal("go", timeout=3600)

    @durable.workflow
    def idle() -> None:
        return None

    durable.schedule(slow, every=60, name="every-minute")
    durable.schedule(idle, cron="0 3 * * *", tz="Europe/Paris", name="nightly")
    due = next_slot(durable, "every-minute")
    fire_at(durable, due + 1)
    fire_at(durable, due + 61)  # its run still waits: this slot is skipped
    return due, runs_of(durable.runtime.store, "every-minute")[0].run_id


def paused_of(durable: Any, name: str) -> bool:
    [row] = [row for row in durable.runtime.store.schedules.list_schedules() if row.name == name]
    return bool(row.paused)


def test_the_dashboard_lists_each_schedule_and_links_its_last_run(durable):
    pytest.importorskip("flask")
    _, run_id = a_skipping_schedule(durable)
    client = durable.dashboard_app().test_client()
    assert 'href="/schedules"' in client.get("/").get_data(as_text=True)  # in the nav
    page = client.get("/schedules")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    row = re.search(r'<tr data-schedule="every-minute">.*?</tr>', html, re.S)
    assert row is not None
    shown = row.group(0)
    assert "every 1m" in shown and 'data-status="skipping"' in shown
    assert f'href="{url_for_run(run_id)}"' in shown and "waiting" in shown
    [lag] = [
        row.last_lag
        for row in durable.runtime.store.schedules.list_schedules()
        if row.name == "every-minute"
    ]
    # The lag, then skipped 1, missed 0.
    cells = rf'<td class="num">{re.escape(console.span(lag))}</td>\s*<td class="num">1</td>'
    assert re.search(cells + r'\s*<td class="num">0</td>', shown)
    assert 'aria-label="Pause every-minute"' in shown and "Trigger" in shown
    nightly = re.search(r'<tr data-schedule="nightly">.*?</tr>', html, re.S)
    assert nightly is not None and "Europe/Paris" in nightly.group(0)
    assert 'data-status="active"' in nightly.group(0)
    html = durable.dashboard_app(read_only=True).test_client().get("/schedules").get_data(True)
    assert "every-minute" in html and 'aria-label="Pause' not in html


def url_for_run(run_id: str) -> str:
    from urllib.parse import quote

    return "/run/" + quote(run_id, safe="/:")


def test_pause_resume_and_trigger_from_the_dashboard_need_the_csrf_token(durable):
    pytest.importorskip("flask")
    due, _ = a_skipping_schedule(durable)
    client = durable.dashboard_app().test_client()
    client.get("/schedules")
    token = str(client.get_cookie("durable_csrf").value)
    for forged in ({}, {"csrf_token": "not-the-cookie"}):
        refused = client.post("/schedules/pause", data={"name": "every-minute", **forged})
        assert refused.status_code == 403 and b"CSRF" in refused.data
        assert (
            client.post("/schedules/trigger", data={"name": "every-minute", **forged}).status_code
            == 403
        )
    assert not paused_of(durable, "every-minute")
    assert slot_outcomes(durable.runtime.store, "every-minute") == {"started": 1, "skipped": 1}

    paused = client.post("/schedules/pause", data={"name": "every-minute", "csrf_token": token})
    assert paused.status_code == 303 and paused.headers["Location"].endswith("/schedules")
    assert paused_of(durable, "every-minute")
    html = client.get("/schedules").get_data(as_text=True)
    assert "Paused &#39;every-minute&#39;: it no longer fires." in html
    assert 'data-status="paused"' in html and 'aria-label="Resume every-minute"' in html
    fire_at(durable, due + 3600)  # an hour on: "nightly" may fire (between 1 and 2 UTC)
    assert len(runs_of(durable.runtime.store, "every-minute")) == 1  # paused: it fired no more

    resumed = client.post(
        "/schedules/resume",
        data={"name": "every-minute", "csrf_token": token},
        follow_redirects=True,
    )
    assert "Resumed &#39;every-minute&#39;" in resumed.get_data(as_text=True)
    assert not paused_of(durable, "every-minute")

    triggered = client.post(
        "/schedules/trigger",
        data={"name": "nightly", "csrf_token": token},
        follow_redirects=True,
    ).get_data(as_text=True)
    started = re.search(
        r"Triggered &#39;nightly&#39;: run (schedule:nightly:manual:\S+) started", triggered
    )
    assert started is not None
    assert durable.get_handle(started.group(1)).get(timeout=5) is None
    assert slot_outcomes(durable.runtime.store, "nightly").get("triggered") == 1

    unknown = client.post(
        "/schedules/pause", data={"name": "nope", "csrf_token": token}, follow_redirects=True
    )
    assert "Cannot pause: no schedule named &#39;nope&#39;" in unknown.get_data(as_text=True)
    assert (
        client.post("/schedules/delete", data={"name": "nightly", "csrf_token": token}).status_code
        == 404
    )
    read_only = durable.dashboard_app(read_only=True).test_client()
    read_only.get("/schedules")
    ro_token = str(read_only.get_cookie("durable_csrf").value)
    refused = read_only.post("/schedules/pause", data={"name": "nightly", "csrf_token": ro_token})
    assert refused.status_code == 403 and not paused_of(durable, "nightly")


def test_prometheus_says_how_late_each_schedule_last_fired(durable):
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from celery_durable.ops.metrics import DurableCollector

    @durable.workflow
    def tick() -> None:
        return None

    durable.schedule(tick, every=1, name="each-second")
    durable.schedule(tick, cron="0 3 * * *", name="nightly")  # never fires here
    due = next_slot(durable, "each-second")
    # A slot's lag is the database's clock when it fired less the slot: fire it once the
    # real clock has passed it (at most a second away).
    wait_until(lambda: time.time() > due + 0.05, 5, 0.01, message="the slot to pass")
    assert fire_at(durable, due + 0.05) == 1
    [stored] = [
        row.last_lag
        for row in durable.runtime.store.schedules.list_schedules()
        if row.name == "each-second"
    ]
    assert stored is not None and 0 < stored < 5
    registry = CollectorRegistry()
    registry.register(DurableCollector([durable]))
    text = generate_latest(registry).decode()
    [family] = [
        f
        for f in text_string_to_metric_families(text)
        if f.name == "celery_durable_schedule_lag_seconds"
    ]
    assert family.type == "gauge"
    lags = {s.labels["schedule"]: (s.labels["namespace"], s.value) for s in family.samples}
    # "nightly" has no started slot: no lag to say, no sample.
    assert lags == {"each-second": (durable.runtime.config.namespace, pytest.approx(stored))}
