"""``create_app(host_csrf=True)``: the framework the dashboard is mounted in (Django) checks
CSRF and names, in the WSGI environ, the field and token the forms carry. Through Flask's
test client on the embedded store (the ``durable`` fixture); the Django side runs in
tests/integration/test_django_dashboard.py."""

from __future__ import annotations

from typing import Any

import pytest

from celery_durable import Durable
from celery_durable.ops.dashboard.security import HOST_CSRF
from tests.support.dashboard import held_run

pytest.importorskip("flask")

CHECKED = {HOST_CSRF: ("csrfmiddlewaretoken", "from-the-host")}


@pytest.fixture
def waiting(durable: Durable) -> Any:
    return held_run(durable)


def test_forms_carry_the_hosts_field_and_token_and_its_checked_posts_act(durable, waiting):
    client = durable.dashboard_app(host_csrf=True).test_client()
    html = client.get(f"/run/{waiting.id}", environ_overrides=CHECKED).get_data(as_text=True)
    assert '<input type="hidden" name="csrfmiddlewaretoken" value="from-the-host">' in html
    assert 'name="csrf_token"' not in html and client.get_cookie("durable_csrf") is None
    done = client.post("/action/cancel", data={"id": waiting.id}, environ_overrides=CHECKED)
    assert done.status_code == 303 and waiting.status().value == "CANCELLED"


def test_a_post_the_host_did_not_check_is_refused(durable, waiting):
    client = durable.dashboard_app(host_csrf=True).test_client()
    refused = client.post("/action/cancel", data={"id": waiting.id})
    assert refused.status_code == 403
    assert waiting.status().value == "WAITING"


def test_the_standalone_dashboard_ignores_the_environ_key(durable, waiting):
    client = durable.dashboard_app().test_client()
    refused = client.post("/action/cancel", data={"id": waiting.id}, environ_overrides=CHECKED)
    assert refused.status_code == 403
    html = client.get(f"/run/{waiting.id}", environ_overrides=CHECKED).get_data(as_text=True)
    assert 'name="csrf_token"' in html and "from-the-host" not in html
    assert waiting.status().value == "WAITING"
