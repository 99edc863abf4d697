"""``durable show`` lists the requests a run received, in text and in JSON alike: each
one's name and status (answered, refused, rejected, pending, or not handled once the run
ended without answering) and the step that took it; a run that waits for one says so."""

from __future__ import annotations

import json
from typing import Any

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError

import celery_durable as cd
from celery_durable import Durable, UpdateRejected
from tests.support.cli import invoke


def shown(durable: Durable, run_id: str) -> tuple[str, dict[str, Any]]:
    """``durable show`` of the run: its text and its JSON."""
    return invoke(durable, "show", run_id), json.loads(invoke(durable, "show", run_id, "--json"))


def test_show_lists_each_request_with_its_status(durable):
    @durable.workflow(max_attempts=1)
    def counter() -> int:
        count = 0
        while True:
            req = cd.wait_for_update("add")
            if req.payload == 0:
                req.reject("zero adds nothing")
                continue
            count += req.payload
            req.reply(count)
            if count >= 3:
                cd.wait_for_signal("never")

    @counter.validator("add")
    def positive(n: Any) -> None:
        if not isinstance(n, int) or n < 0:
            raise ValueError("a count is a non-negative int")

    handle = counter.delay()
    text, js = shown(durable, handle.id)
    assert "waiting for update 'add'" in text
    assert js["waiting"] == {"update": "add", "until": None}
    assert handle.update("add", 1) == 1
    with pytest.raises(UpdateRejected):
        handle.update("add", -1)
    with pytest.raises(UpdateRejected):
        handle.update("add", 0)
    assert handle.update("add", 2, idempotency_key="two") == 3
    with pytest.raises(CeleryTimeoutError):
        handle.update("add", 5, timeout=0)  # the run waits for a signal now
    text, js = shown(durable, handle.id)
    assert [(u["name"], u["status"], u["step"]) for u in js["updates"]] == [
        ("add", "answered", 0),
        ("add", "refused", None),
        ("add", "rejected", 2),
        ("add", "answered", 4),
        ("add", "pending", None),
    ]
    assert js["updates"][3]["idempotency_key"] == "two"
    assert all(u["sent_at"] for u in js["updates"])
    ids = [u["id"] for u in js["updates"]]
    assert "updates:" in text
    assert f"  update 'add' #{ids[0]}: answered (step 0)" in text
    assert f"  update 'add' #{ids[1]}: refused" in text
    assert f"  update 'add' #{ids[2]}: rejected (step 2)" in text
    assert f"  update 'add' #{ids[4]}: pending" in text
    handle.cancel("done counting")
    text, js = shown(durable, handle.id)
    assert js["updates"][4]["status"] == "not handled"
    assert f"  update 'add' #{ids[4]}: not handled" in text


def test_the_dashboards_run_page_lists_the_requests_and_the_wait(durable):
    pytest.importorskip("flask")

    @durable.workflow(max_attempts=1)
    def asker() -> None:
        cd.wait_for_update("ask").reply("yes")
        cd.wait_for_update("again")

    handle = asker.delay()
    client = durable.dashboard_app().test_client()
    page = client.get(f"/run/{handle.id}").get_data(as_text=True)
    assert "update <code>ask</code>" in page and "None received." in page
    assert handle.update("ask", idempotency_key="k-1") == "yes"
    page = client.get(f"/run/{handle.id}").get_data(as_text=True)
    assert "update <code>again</code>" in page
    assert "<code>ask</code> #1 sent" in page and 'data-status="answered"' in page
    assert "(step 0)" in page and "(key k-1)" in page
    # Drawn again with each refresh of the page's head, as a request's status changes.
    refreshed = client.get(f"/run/{handle.id}?partial=1").get_data(as_text=True)
    assert "<code>ask</code> #1 sent" in refreshed and 'data-status="answered"' in refreshed


def test_show_leaves_the_updates_out_of_a_run_that_got_none(durable):
    @durable.workflow
    def plain() -> int:
        return 1

    handle = plain.delay()
    text, js = shown(durable, handle.id)
    assert js["updates"] == [] and "updates:" not in text
