"""Which Host the dashboard answers to (loopback by default, ``allowed_hosts``), behind a
reverse proxy (``trusted_proxies``: X-Forwarded-*, Secure cookies), and what it refuses to
serve on. Through Flask's test client on the embedded store (the ``durable`` fixture); the
served process: tests/integration/test_dashboard_serving.py."""

from __future__ import annotations

from typing import Any

import pytest

from celery_durable import Durable
from celery_durable.errors import ConfigurationError
from celery_durable.ops.dashboard import security
from tests.support.dashboard import held_run

pytest.importorskip("flask")

REBOUND = "rebound.example:5580"  # an attacker's name, made to resolve to 127.0.0.1


@pytest.fixture
def waiting(durable: Durable) -> Any:
    return held_run(durable)


def test_a_rebound_host_with_a_matching_origin_gets_no_token_and_sends_no_signal(durable, waiting):
    """Bug: the page of a DNS-rebound name got a CSRF token and sent a signal that
    completed the run: its Host and Origin agree, and the double-submit cookie is the
    browser's for that name."""
    client = durable.dashboard_app().test_client(use_cookies=False)
    page = client.get("/", headers={"Host": REBOUND})
    assert page.status_code == 400 and "Set-Cookie" not in page.headers
    assert f"does not answer to Host {REBOUND!r}" in page.get_data(as_text=True)
    sent = client.post(
        "/action/signal",
        headers={"Host": REBOUND, "Origin": f"http://{REBOUND}", "Cookie": "durable_csrf=chosen"},
        data={"id": waiting.id, "name": "go", "payload": "1", "csrf_token": "chosen"},
    )
    assert sent.status_code == 400
    assert waiting.status().value == "WAITING"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1:5580", "[::1]:5580", "LOCALHOST."])
def test_loopback_names_are_answered_by_default(durable, host):
    assert durable.dashboard_app().test_client().get("/", headers={"Host": host}).status_code == 200


def test_allowed_hosts_names_the_others(durable):
    client = durable.dashboard_app(allowed_hosts="ops.example.com,.corp.example").test_client()
    for host, status in [
        ("ops.example.com", 200),
        ("ops.example.com:8443", 200),
        ("a.corp.example", 200),
        ("corp.example", 200),
        ("localhost", 400),  # the list replaces the default
        ("evil-corp.example", 400),
        ("ops.example.com.evil", 400),
    ]:
        assert client.get("/", headers={"Host": host}).status_code == status, host
    anyone = durable.dashboard_app(allowed_hosts="*").test_client()
    assert anyone.get("/", headers={"Host": "anything.example"}).status_code == 200


PROXIED = {
    "Host": "127.0.0.1:5580",  # the proxy rewrote it
    "X-Forwarded-Host": "ops.example.com",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-For": "203.0.113.9",
}


def post_through_proxy(client: Any, run_id: str) -> Any:
    """GET the run's page as the proxy forwards it, then POST its cancel form with the
    cookie it set (the client keeps no cookies: a Secure one is not for its http URL)."""
    page = client.get(f"/run/{run_id}", headers=PROXIED)
    token = page.headers["Set-Cookie"].split(";")[0].partition("=")[2]
    return client.post(
        "/action/cancel",
        headers={**PROXIED, "Origin": "https://ops.example.com", "Cookie": f"durable_csrf={token}"},
        data={"id": run_id, "csrf_token": token},
    )


def test_behind_a_proxy_that_rewrites_host_a_refusal_names_the_setting(durable, waiting):
    """Bug: every action was refused with "missing or wrong CSRF token"."""
    refused = post_through_proxy(durable.dashboard_app().test_client(use_cookies=False), waiting.id)
    assert refused.status_code == 403
    text = refused.get_data(as_text=True)
    assert "CSRF token" not in text
    assert "came from https://ops.example.com" in text and "--trusted-proxies" in text
    assert waiting.status().value == "WAITING"


def test_trusted_proxies_honours_x_forwarded_and_marks_cookies_secure(durable, waiting):
    app = durable.dashboard_app(allowed_hosts="ops.example.com", trusted_proxies=1)
    client = app.test_client(use_cookies=False)
    page = client.get(f"/run/{waiting.id}", headers=PROXIED)
    assert page.status_code == 200
    cookie = page.headers["Set-Cookie"]
    assert cookie.startswith("durable_csrf=") and "Secure" in cookie
    done = post_through_proxy(client, waiting.id)
    assert done.status_code == 303
    assert done.headers["Location"] == f"/run/{waiting.id}"
    assert "Secure" in done.headers["Set-Cookie"]  # the session's notice cookie
    assert waiting.status().value == "CANCELLED"


def test_cookies_are_not_secure_over_plain_http(durable):
    page = durable.dashboard_app().test_client().get("/")
    assert "Secure" not in page.headers["Set-Cookie"]


@pytest.mark.parametrize(
    ("address", "refused"),
    [("127.0.0.1", False), ("::1", False), ("localhost", False), ("0.0.0.0", True)],
)
def test_beyond_loopback_needs_authentication_or_the_flag(durable, address, refused):
    from celery_durable.ops.dashboard.serve import make_dashboard_server  # noqa: PLC0415

    if refused:
        with pytest.raises(ConfigurationError, match="--allow-unauthenticated"):
            make_dashboard_server(durable, address, 0)
    for options in ({"basic_auth": "ops:pw"}, {"allow_unauthenticated": True}):
        server = make_dashboard_server(durable, address, 0, **options)
        server.server_close()


def test_parse_hosts_and_host_names():
    assert security.parse_hosts(" Ops.Example.com, .corp., ") == ("ops.example.com", ".corp")
    assert security.host_name("[::1]:5580") == "::1"
    assert security.host_name("::1") == "::1"
    assert security.host_name("ops.example.com:443") == "ops.example.com"
