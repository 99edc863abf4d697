"""Who acted, in the run's actions: the standalone dashboard records the basic-auth user
(None without authentication), a host framework the user it names in the environ
(``HOST_ACTOR``); the run page and ``durable show`` list them. Flask's test client on the
embedded store; the Django side: tests/integration/test_django_dashboard.py."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

import celery_durable as cd
from celery_durable import Durable
from celery_durable.ops.dashboard.security import HOST_ACTOR, HOST_CSRF
from tests.support.cli import invoke

pytest.importorskip("flask")


@pytest.fixture
def held(durable: Durable) -> Any:
    @durable.workflow
    def held() -> Any:
        return cd.wait_for_signal("go")

    return held


def post(client: Any, action: str, headers: dict[str, str] | None = None, **form: str) -> Any:
    client.get("/", headers=headers)
    token = client.get_cookie("durable_csrf").value
    return client.post(f"/action/{action}", headers=headers, data={**form, "csrf_token": token})


def actions_of(durable: Durable, run_id: str) -> list[tuple[str, str | None, str | None]]:
    return [(a.action, a.actor, a.detail) for a in durable.runtime.store.run_actions(run_id)]


def test_the_basic_auth_user_is_recorded_with_each_action(durable, held):
    run = held.apply_async((), run_id="acted-1")
    client = durable.dashboard_app(basic_auth="alice:pw1,bob:pw2").test_client()
    alice = {"Authorization": "Basic " + base64.b64encode(b"alice:pw1").decode()}
    bob = {"Authorization": "Basic " + base64.b64encode(b"bob:pw2").decode()}
    assert post(client, "signal", bob, id=run.id, name="nudge", payload="{}").status_code == 303
    assert post(client, "cancel", alice, id=run.id, reason="stop").status_code == 303
    assert post(client, "resume", alice, id=run.id).status_code == 303
    assert actions_of(durable, run.id) == [
        ("signal", "bob", "nudge"),
        ("cancel", "alice", "stop"),
        ("resume", "alice", None),
    ]
    page = client.get(f"/run/{run.id}", headers=alice).get_data(as_text=True)
    assert "<strong>cancel</strong> by <code>alice</code>: stop" in page
    shown = invoke(durable, "show", run.id)
    assert "cancel by alice at " in shown and shown.count(" by bob at ") == 1
    as_json = json.loads(invoke(durable, "show", run.id, "--json"))["actions"]
    assert [(a["action"], a["actor"], a["detail"]) for a in as_json] == actions_of(durable, run.id)


def test_a_fork_is_recorded_on_both_runs(durable, held):
    run = held.apply_async((), run_id="origin-1")
    run.cancel("to fork")
    client = durable.dashboard_app().test_client()
    done = post(client, "fork", id=run.id, from_step="0", new_id="forked-1")
    assert done.status_code == 303
    assert actions_of(durable, run.id) == [("fork", None, "as run forked-1 from step 0")]
    assert actions_of(durable, "forked-1") == [("fork", None, "from run origin-1 at step 0")]
    page = client.get(f"/run/{run.id}").get_data(as_text=True)
    assert 'by <span class="muted">an unauthenticated user</span>' in page


def test_the_host_frameworks_user_is_recorded_and_a_header_cannot_forge_it(durable, held):
    run = held.apply_async((), run_id="hosted-1")
    client = durable.dashboard_app(host_csrf=True).test_client()
    environ = {HOST_CSRF: ("csrfmiddlewaretoken", "t"), HOST_ACTOR: "carol"}
    done = client.post(
        "/action/cancel",
        data={"id": run.id},
        headers={"X-Celery-Durable-Actor": "mallory"},
        environ_overrides=environ,
    )
    assert done.status_code == 303
    assert actions_of(durable, run.id) == [("cancel", "carol", None)]
