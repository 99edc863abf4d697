"""The stream's Server-Sent Events and the run page's streams, in-process (Flask's test
client, the embedded default): ids are offsets, Last-Event-ID resumes, a close event ends
it; a missing run is a 404, a bad offset a 400."""

from __future__ import annotations

import json

import pytest

import celery_durable as cd
from celery_durable import Durable
from celery_durable.testing import eager_workflows

pytest.importorskip("flask")


def finished_run(durable: Durable) -> str:
    @durable.workflow
    def chat() -> None:
        for n in range(3):
            cd.write_stream("tokens", {"n": n})

    with eager_workflows(durable):
        chat.apply_async((), run_id="chat-sse").get(timeout=10)
    return "chat-sse"


def test_the_events_carry_offsets_and_resume_after_last_event_id(durable: Durable) -> None:
    from celery_durable.ops.dashboard import dashboard_app

    run_id = finished_run(durable)
    client = dashboard_app(durable).test_client()
    answer = client.get(f"/stream?id={run_id}&key=tokens")
    assert answer.status_code == 200 and answer.mimetype == "text/event-stream"
    assert answer.get_data(as_text=True) == (
        "retry: 2000\n\n"
        'id: 0\ndata: {"n": 0}\n\n'
        'id: 1\ndata: {"n": 1}\n\n'
        'id: 2\ndata: {"n": 2}\n\n'
        'event: close\ndata: {"length": 3}\n\n'
    )
    resumed = client.get(f"/stream?id={run_id}&key=tokens", headers={"Last-Event-ID": "1"})
    assert 'id: 2\ndata: {"n": 2}\n\nevent: close' in resumed.get_data(as_text=True)
    assert "id: 1\n" not in resumed.get_data(as_text=True)
    later = client.get(f"/stream?id={run_id}&key=tokens&from=2").get_data(as_text=True)
    assert later.count("id: ") == 1
    assert client.get("/stream?id=nobody&key=tokens").status_code == 404
    assert client.get(f"/stream?id={run_id}&key=tokens&from=-1").status_code == 400
    assert client.get(f"/stream?id={run_id}").status_code == 400  # no key


def test_the_run_page_lists_each_stream_to_follow(durable: Durable) -> None:
    from celery_durable.ops.dashboard import dashboard_app

    run_id = finished_run(durable)
    page = dashboard_app(durable).test_client().get(f"/run/{run_id}").get_data(as_text=True)
    assert '<div class="stream" data-key="tokens">' in page
    assert "3 value(s), closed" in page
    assert f'data-stream="/stream?id={run_id}&amp;key=tokens&amp;from=0"' in page
    json.dumps(page)  # the page rendered whole
