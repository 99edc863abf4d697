"""The dashboard without a browser: its pages and actions through Flask's test client, on
the embedded SQLite store in eager mode (the ``durable`` fixture), and ``durable_redact``
in ``durable show --json``. The browser tests (tests/integration/test_dashboard_browser.py)
cover the rest.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import types
from typing import Any

import pytest
from click.testing import CliRunner

import celery_durable as cd
from celery_durable import Durable
from celery_durable.cli import durable as durable_group
from celery_durable.core.redact import redactor_of
from celery_durable.ops import console
from tests.support.builders import new_run

pytest.importorskip("flask")

SECRET = "hunter2"


def define(durable: Durable) -> types.SimpleNamespace:
    @durable.step
    def echo(value: Any) -> Any:
        return value

    @durable.workflow
    def login(user: str, size: int = 10) -> str:
        echo({"user": user, "Password": SECRET})
        cd.set_state({"stage": "done", "token": SECRET})
        return "<b>" + "x" * size + "</b>"

    @durable.workflow
    def approval(user: str) -> Any:
        echo(user)
        return cd.wait_for_signal("go")

    return types.SimpleNamespace(login=login, approval=approval)


@pytest.fixture
def flows(durable: Durable) -> types.SimpleNamespace:
    durable.app.conf.durable_redact = ["password", "token"]
    return define(durable)


def client_of(durable: Durable, **options: Any) -> Any:
    return durable.dashboard_app(**options).test_client()


def csrf(client: Any) -> str:
    client.get("/")
    return str(client.get_cookie("durable_csrf").value)


def test_pages_redact_and_escape_and_cut_long_outputs(durable, flows):
    handle = flows.login.delay("al", 5000)
    client = client_of(durable)
    page = client.get(f"/run/{handle.id}")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert SECRET not in html and '"Password": "***"' in html.replace("&#34;", '"')
    assert "&lt;b&gt;xxx" in html and "<b>xxx" not in html
    assert "show all (5009 characters)" in html  # the JSON string: 5,007 characters + quotes
    assert len(html) < 12_000
    full = client.get(f"/value?id={handle.id}&what=result").get_data(as_text=True)
    assert "x" * 5000 in full and "<b>" not in full
    state = client.get(f"/value?id={handle.id}&what=state-state").get_data(as_text=True)
    assert SECRET not in state and "done" in state
    step = client.get(f"/value?id={handle.id}&what=step-0-input").get_data(as_text=True)
    assert "al" in step and SECRET not in step
    assert client.get(f"/value?id={handle.id}&what=step-x-input").status_code == 404
    # The runs page never carries outputs.
    assert "xxxxx" not in client.get("/").get_data(as_text=True)
    assert client.get("/run/nope").status_code == 404


def test_the_step_timeline_shows_each_steps_attempt_and_start(durable, flows):
    handle = flows.login.delay("al")
    step = durable.runtime.store.load_steps(handle.id)[0]
    assert step.started_at is not None and step.attempt == 1
    html = client_of(durable).get(f"/run/{handle.id}").get_data(as_text=True)
    head = re.search(r'<li class="step" id="step-0">.*?</div>', html, re.S)
    assert head is not None, html
    started = console.iso(step.started_at)
    assert started is not None
    # The time of day it began, how long after the run's start, the full time on hover.
    when = re.escape(f'<span class="when" title="{started}">attempt 1 · started {started[11:23]}')
    assert re.search(when + r" \(\+\d+\.\d\ds\)</span>", head.group(0)), head.group(0)


def test_cli_show_json_applies_durable_redact(durable, flows):
    handle = flows.login.delay("al")
    done = CliRunner().invoke(
        durable_group, ["show", handle.id, "--json"], obj=types.SimpleNamespace(app=durable.app)
    )
    assert done.exit_code == 0, done.output
    shown = json.loads(done.output)
    assert shown["steps"][0]["input"] == [[{"user": "al", "Password": "***"}], {}]
    assert shown["steps"][0]["attempt"] == 1
    assert shown["steps"][0]["started_at"].startswith(shown["started_at"][:10])
    assert SECRET not in done.output


def test_the_dashboard_command_refuses_a_malformed_basic_auth_without_echoing_it(durable):
    obj = types.SimpleNamespace(app=durable.app)
    for given, fault in (
        ("s3cretpassword", "entry 1 of 1 has no ':'"),
        ("ops:s3cret,admin:", "entry 2 of 2 has an empty password"),
        (":s3cret", "entry 1 of 1 has an empty user"),
    ):
        done = CliRunner().invoke(durable_group, ["dashboard", "--basic-auth", given], obj=obj)
        assert done.exit_code == 2
        assert "--basic-auth wants user:password[,user:password]" in done.output
        assert fault in done.output
        assert "s3cret" not in done.output  # it may be a password


def test_redact_takes_a_callable_or_keys():
    assert redactor_of(None)({"password": 1}) == {"password": 1}
    assert redactor_of("token, pin")({"a": [{"PIN": 1, "b": 2}]}) == {"a": [{"PIN": "***", "b": 2}]}
    assert redactor_of(lambda value: "hidden")({"x": 1}) == "hidden"
    with pytest.raises(cd.ConfigurationError):
        redactor_of(42)


def test_runs_page_filters_searches_and_says_what_is_wrong(durable, flows):
    handles = [flows.login.apply_async(("al",), run_id=f"user-{i}") for i in range(3)]
    waiting = flows.approval.apply_async(("bo",), run_id="other-1")
    client = client_of(durable)
    ids = re.compile(r'data-run="([^"]+)"')
    html = client.get("/").get_data(as_text=True)
    everything = ids.findall(html)
    assert set(everything) >= {h.id for h in handles} | {waiting.id}
    # Each run's current step: the last it recorded (the wait), with its full name.
    row = re.search(r'<tr data-run="other-1">.*?</tr>', html, re.S)
    assert row is not None
    assert 'title="celery_durable.signal:go (waiting)">1: signal:go</span>' in row.group(0)
    assert ids.findall(client.get("/?q=user-").get_data(as_text=True)) == [
        "user-0",
        "user-1",
        "user-2",
    ]
    assert ids.findall(client.get("/?status=waiting").get_data(as_text=True)) == ["other-1"]
    wrong = client.get("/?since=yesterday-ish").get_data(as_text=True)
    assert "since=&#39;yesterday-ish&#39; is neither" in wrong
    live = client.get("/?status=waiting&partial=1").get_data(as_text=True)
    assert "<html" not in live and "other-1" in live
    workflows = client.get("/workflows").get_data(as_text=True)
    assert re.search(r"\.login</a>.*?<td class=\"num\"><a[^>]*>3</a>", workflows, re.S)


def test_the_runs_table_says_when_each_run_started(durable, flows):
    done = flows.login.apply_async(("al",), run_id="started-1")
    durable.runtime.store.insert_run(new_run("queued-1", name=flows.login.name, max_attempts=1))
    html = client_of(durable).get("/").get_data(as_text=True)
    record = durable.runtime.store.get_run(done.id)
    assert record is not None and record.started_at is not None
    started = re.search(r'<tr data-run="started-1">.*?</tr>', html, re.S)
    assert started is not None
    assert f">{console.iso(record.started_at, False)}</td>" in started.group(0)
    assert f'title="created {console.iso(record.created_at, False)}"' in started.group(0)
    queued = re.search(r'<tr data-run="queued-1">.*?</tr>', html, re.S)
    assert queued is not None and "not yet" in queued.group(0)


def test_actions_say_what_happened_and_refuse_what_they_cannot_do(durable, flows):
    waiting = flows.approval.apply_async(("bo",), run_id="wait-1")
    client = client_of(durable)
    token = csrf(client)
    sent = client.post(
        "/action/signal",
        data={"id": waiting.id, "name": "go", "payload": '{"ok": true}', "csrf_token": token},
        follow_redirects=True,
    )
    assert "Signal &#39;go&#39; stored." in sent.get_data(as_text=True)
    assert waiting.get(timeout=5) == {"ok": True}
    html = client.get(f"/run/{waiting.id}").get_data(as_text=True)
    consumed = html[html.index("Consumed signals") :]
    assert "<code>go</code> sent" in consumed and "{&#34;ok&#34;: true}" in consumed
    again = client.post(
        "/action/cancel", data={"id": waiting.id, "csrf_token": token}, follow_redirects=True
    )
    assert "Cannot cancel: " in again.get_data(as_text=True)
    bad = client.post(
        "/action/fork",
        data={"id": waiting.id, "from_step": "9", "csrf_token": token},
        follow_redirects=True,
    )
    assert "Cannot fork: " in bad.get_data(as_text=True)
    forked = client.post(
        "/action/fork",
        data={"id": waiting.id, "from_step": "1", "new_id": "wait-2", "csrf_token": token},
    )
    assert forked.status_code == 303 and forked.headers["Location"].endswith("/run/wait-2")
    assert client.post("/action/resume", data={"id": waiting.id}).status_code == 403


def test_read_only_shows_no_action_and_refuses_posts(durable, flows):
    waiting = flows.approval.apply_async(("bo",), run_id="ro-1")
    client = client_of(durable, read_only=True)
    html = client.get(f"/run/{waiting.id}").get_data(as_text=True)
    assert "Cancel run" not in html and "read-only" in html
    refused = client.post("/action/cancel", data={"id": waiting.id, "csrf_token": csrf(client)})
    assert refused.status_code == 403
    assert waiting.status().value == "WAITING"


def test_headers_basic_auth_and_url_prefix(durable, flows):
    client = client_of(durable, basic_auth="ops:s3cret,admin:pw", url_prefix="/durable")
    assert client.get("/durable/").status_code == 401
    auth = {"Authorization": "Basic " + base64.b64encode(b"admin:pw").decode()}
    page = client.get("/durable/", headers=auth)
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert 'href="/durable/static/dashboard.css"' in page.get_data(as_text=True)
    assert client.get("/", headers=auth).headers["Location"].endswith("/durable/")
    assert client.get("/durable/static/dashboard.js", headers=auth).status_code == 200
    with pytest.raises(ValueError, match="user:password"):
        durable.dashboard_app(basic_auth="nocolon")


def test_the_asgi_app_serves_the_same_pages(durable, flows):
    app = durable.dashboard_app(asgi=True)
    sent: list[dict[str, Any]] = []

    async def call() -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/workflows",
            "raw_path": b"/workflows",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"host", b"localhost")],
            "server": ("localhost", 80),
            "client": ("127.0.0.1", 1234),
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)

    # In a thread of its own: Playwright's sync API may hold a running loop in this one.
    runner = threading.Thread(target=lambda: asyncio.run(call()))
    runner.start()
    runner.join(30)
    assert sent[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in sent[1:]).decode()
    assert "Workflows" in body


def test_a_requested_cancel_of_a_running_run_shows_on_both_pages(durable, flows):
    """Bug: the runs table and the run page said RUNNING and nothing of the cancel."""
    durable.runtime.store.insert_run(new_run("busy-1", name=flows.login.name, max_attempts=1))
    assert durable.runtime.store.claim_run("busy-1", "elsewhere", lease=60) is not None  # RUNNING
    assert durable.get_handle("busy-1").cancel("wrong order").value == "RUNNING"
    client = client_of(durable)
    html = client.get("/").get_data(as_text=True)
    listed = re.search(r'<tr data-run="busy-1">.*?</tr>', html, re.S)
    assert listed is not None and "cancel requested: wrong order" in listed.group(0)
    page = client.get("/run/busy-1").get_data(as_text=True)
    assert "cancel requested (wrong order): it stops at its next step" in page
