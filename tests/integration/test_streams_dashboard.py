"""A run's stream on the dashboard: the Server-Sent Events endpoint served by waitress
behind the dashboard's basic auth (ids are offsets: ``Last-Event-ID`` resumes), and the
run page following the stream live in a real browser (Playwright, Debian's Chromium)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.dashboard import Dashboard
from tests.support.services import BROKER
from tests.support.waiting import wait_until

pytest.importorskip("flask")
APP = "tests.apps.streams"
SECONDS = 1000  # Playwright's timeouts are in milliseconds


@pytest.fixture(scope="module")
def board(streams_app: object) -> Iterator[Dashboard]:
    process = Dashboard(APP).wait_ready()
    yield process
    process.stop()


def token(n: int) -> dict[str, Any]:
    return {"n": n, "text": f"t{n}"}


def open_events(
    board: Dashboard, run_id: str, key: str, last_event_id: str | None = None, auth: bool = True
) -> Any:
    query = urllib.parse.urlencode({"id": run_id, "key": key})
    headers = {"Accept": "text/event-stream"}
    if auth:
        pair = f"{board.user}:{board.password}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    request = urllib.request.Request(f"{board.url}/stream?{query}", headers=headers)
    return urllib.request.urlopen(request, timeout=60)


def events(response: Any) -> Iterator[dict[str, str]]:
    """Each event of a text/event-stream response, as its fields (comments left out)."""
    fields: dict[str, str] = {}
    for raw in response:
        line = raw.decode().rstrip("\n")
        if not line:
            if fields:
                yield fields
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value


def test_the_sse_endpoint_streams_values_with_offsets_and_resumes_after_last_event_id(
    streams_app, start_worker, board, key, rds
):
    rds.set(f"block:{key}:g", "1")
    start_worker("sse", app=APP)
    handle = streams_app.tokens.delay(key, 10)
    with open_events(board, handle.id, "tokens") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        got = events(response)
        assert next(got) == {"retry": "2000"}
        first = [next(got) for _ in range(5)]
    assert first == [{"id": str(n), "data": json.dumps(token(n))} for n in range(5)]
    rds.delete(f"block:{key}:g")  # the browser went away; the run goes on
    with open_events(board, handle.id, "tokens", last_event_id="4") as response:
        rest = [e for e in events(response) if "retry" not in e]
    assert rest[:-1] == [{"id": str(n), "data": json.dumps(token(n))} for n in range(5, 10)]
    assert rest[-1] == {"event": "close", "data": json.dumps({"length": 10})}
    assert handle.get(timeout=60) == 1
    with pytest.raises(urllib.error.HTTPError) as refused:
        open_events(board, handle.id, "tokens", auth=False)
    assert refused.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as missing:
        open_events(board, "no-such-run", "tokens")
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as bad:
        open_events(board, handle.id, "tokens", last_event_id="x")
    assert bad.value.code == 400


@pytest.mark.skipif(BROKER != "redis", reason="browser tests run in the Redis pass")
def test_the_run_page_shows_the_stream_live(streams_app, start_worker, board, browser, key, rds):
    from playwright.sync_api import expect

    rds.set(f"block:{key}:g", "1")
    start_worker("sse-page", app=APP)
    handle = streams_app.tokens.delay(key, 10)
    reader = handle.read_stream("tokens", timeout=60)
    assert [next(reader) for _ in range(5)] == [token(n) for n in range(5)]
    context = browser.new_context(
        base_url=board.url,
        http_credentials={"username": board.user, "password": board.password},
    )
    context.set_default_timeout(30 * SECONDS)
    page = context.new_page()
    try:
        page.goto(f"/run/{handle.id}")
        stream = page.locator(".stream[data-key='tokens']")
        values = stream.locator("ol.stream-values li")
        expect(values).to_have_count(5)
        expect(values.nth(4)).to_have_text(json.dumps(token(4), separators=(",", ":")))
        rds.delete(f"block:{key}:g")  # the rest arrives while the page is open
        expect(values).to_have_count(10)
        expect(stream.locator("[data-stream-state]")).to_have_text("10 value(s), closed")
        expect(page.locator(".stream[data-key='events'] ol li")).to_have_count(2)
    finally:
        context.close()
    assert handle.get(timeout=60) == 1


@pytest.mark.skipif(BROKER != "redis", reason="browser tests run in the Redis pass")
def test_a_stream_that_begins_after_the_page_opened_shows_up(
    streams_app, start_worker, board, browser, key, rds
):
    from playwright.sync_api import expect

    rds.set(f"block:{key}:p", "1")  # the run holds before its first value
    start_worker("sse-later", app=APP)
    handle = streams_app.progress.delay(key, 3)
    wait_until(lambda: rds.get(f"started:{key}:p"), 30, message="the run to start")
    context = browser.new_context(
        base_url=board.url,
        http_credentials={"username": board.user, "password": board.password},
    )
    context.set_default_timeout(30 * SECONDS)
    page = context.new_page()
    try:
        page.goto(f"/run/{handle.id}")
        expect(page.locator(".streams")).to_have_count(0)
        rds.delete(f"block:{key}:p")
        values = page.locator(".stream[data-key='progress'] ol.stream-values li")
        expect(values).to_have_count(3)
        expect(values.nth(2)).to_have_text('{"done":3,"of":3}')
    finally:
        context.close()
    assert handle.get(timeout=60) == 3
