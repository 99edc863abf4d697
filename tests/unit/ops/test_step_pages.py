"""A long history a page at a time: the dashboard's run page (and its live refresh) and
``durable show`` read one page of steps from the store, by step index, and say how to
reach the others; on the embedded SQLite store in eager mode (the ``durable`` fixture).
The same reads on Postgres: tests/unit/store/test_step_pages.py."""

from __future__ import annotations

import json
import re
import types
from typing import Any

import pytest
from click.testing import CliRunner

import celery_durable as cd
from celery_durable import Durable
from celery_durable.cli import durable as durable_group

pytest.importorskip("flask")

STEPS = 250


@pytest.fixture
def long_runs(durable: Durable) -> types.SimpleNamespace:
    @durable.step
    def tick(i: int) -> int:
        return i

    @durable.workflow
    def loop(count: int) -> int:
        for i in range(count):
            tick(i)
        return count

    @durable.workflow
    def loop_then_wait(count: int) -> Any:
        for i in range(count):
            tick(i)
        return cd.wait_for_signal("go")

    finished = loop.delay(STEPS)
    waiting = loop_then_wait.delay(STEPS)
    return types.SimpleNamespace(finished=finished.id, waiting=waiting.id)


def step_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<li class="step" id="step-(\d+)">', html)]


def refresh_url(html: str) -> str | None:
    found = re.search(r'data-refresh="([^"]*)"', html)
    return None if found is None else found.group(1).replace("&amp;", "&")


def test_the_run_page_shows_a_page_of_steps_and_links_to_the_others(durable, long_runs):
    """Bug: the page held every step (48 MB for 76,719 steps) and the live refresh
    fetched them all again every 3 s."""
    client = durable.dashboard_app().test_client()
    run_id = long_runs.finished
    latest = client.get(f"/run/{run_id}").get_data(as_text=True)
    assert step_ids(latest) == list(range(150, 250))  # the last page: where a run is now
    assert "(150 to 249 of 250)" in latest
    assert f'href="/run/{run_id}?steps_from=50">earlier steps' in latest
    assert "later steps" not in latest
    first = client.get(f"/run/{run_id}?steps_from=0").get_data(as_text=True)
    assert step_ids(first) == list(range(100))
    assert f'href="/run/{run_id}?steps_from=100">later steps' in first
    partial = client.get(f"/run/{run_id}?partial=1&steps_from=100").get_data(as_text=True)
    assert "<html" not in partial and step_ids(partial) == list(range(100, 200))
    value = client.get(f"/value?id={run_id}&what=step-7-output").get_data(as_text=True)
    assert ">7<" in value


def test_the_live_refresh_reads_the_same_page_never_the_whole_history(durable, long_runs):
    client = durable.dashboard_app().test_client()
    run_id = long_runs.waiting  # 250 ticks and its wait: 251 steps, still running
    page = client.get(f"/run/{run_id}").get_data(as_text=True)
    assert step_ids(page) == list(range(151, 251))
    url = refresh_url(page)
    assert url is not None and "steps_from" not in url  # it follows the newest steps
    assert step_ids(client.get(url).get_data(as_text=True)) == list(range(151, 251))
    chosen = client.get(f"/run/{run_id}?steps_from=20").get_data(as_text=True)
    url = refresh_url(chosen)
    assert url is not None and "steps_from=20" in url  # the page the user chose stays
    assert step_ids(client.get(url).get_data(as_text=True)) == list(range(20, 120))


def test_durable_show_prints_a_page_of_steps_and_how_to_see_the_next(durable, long_runs):
    """Bug: `durable show` printed every step of a long history (76k lines)."""
    obj = types.SimpleNamespace(app=durable.app)
    run_id = long_runs.finished
    done = CliRunner().invoke(
        durable_group, ["show", run_id, "--steps-from", "100", "--steps-limit", "50"], obj=obj
    )
    assert done.exit_code == 0, done.output
    printed = [int(i) for i in re.findall(r"^  step (\d+):", done.output, re.M)]
    assert printed == list(range(100, 150))
    assert "steps 100 to 149 shown of 250; the next page: --steps-from 150" in done.output
    shown = CliRunner().invoke(
        durable_group, ["show", run_id, "--json", "--steps-limit", "100"], obj=obj
    )
    assert shown.exit_code == 0, shown.output
    page = json.loads(shown.output)
    assert [s["index"] for s in page["steps"]] == list(range(100))
    assert (page["step_count"], page["steps_from"], page["next_steps_from"]) == (250, 0, 100)
    everything = CliRunner().invoke(durable_group, ["show", run_id, "--json"], obj=obj)
    whole = json.loads(everything.output)  # under the default of 1,000: every step
    assert len(whole["steps"]) == 250 and whole["next_steps_from"] is None
    last = CliRunner().invoke(
        durable_group, ["show", run_id, "--steps-from", "240", "--steps-limit", "50"], obj=obj
    )
    assert "steps 240 to 249 shown of 250" in last.output and "next page" not in last.output
