"""``celery -A app durable dashboard`` as it serves: waitress, not Werkzeug's development
server; a DNS-rebound Host refused; a reverse proxy that rewrites Host honoured with
``--trusted-proxies``; nothing beyond loopback without authentication unless asked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cli import celery
from tests.support.dashboard import Dashboard
from tests.support.flower import free_port

pytest.importorskip("flask")


@pytest.fixture(scope="module")
def proxied_board(basic_app: Any) -> Iterator[Dashboard]:
    """The dashboard as behind one reverse proxy that serves it as ops.example.com."""
    board = Dashboard("tests.apps.basic", "--trusted-proxies=1", "--allowed-hosts=ops.example.com")
    forwarded = {"X-Forwarded-Host": "ops.example.com", "X-Forwarded-Proto": "https"}

    def up() -> bool:
        return board.call("GET", "/", forwarded)[0] == 200

    board.wait_ready(probe=up)
    yield board
    board.stop()


@pytest.fixture
def pending_run(basic_app: Any, key: str) -> Any:
    """A run no worker takes (its queue has no consumer): actions act on it at once."""
    return basic_app.cancellable.apply_async(args=(key,), queue=f"nobody-{key}")


def test_the_dashboard_is_served_by_waitress(basic_app):
    board = Dashboard("tests.apps.basic").wait_ready()
    try:
        status, headers, _ = board.call("GET", "/")
        assert status == 200 and headers["Server"] == "waitress"
        rebound = f"rebound.example:{board.port}"
        status, _, body = board.call("GET", "/", {"Host": rebound, "Origin": f"http://{rebound}"})
        assert status == 400 and "does not answer to Host" in body
    finally:
        board.stop()


def test_a_proxied_action_works_with_trusted_proxies(proxied_board, pending_run):
    forwarded = {
        "Host": f"127.0.0.1:{proxied_board.port}",  # what the proxy rewrote it to
        "X-Forwarded-Host": "ops.example.com",
        "X-Forwarded-Proto": "https",
    }
    status, headers, _ = proxied_board.call("GET", f"/run/{pending_run.id}", forwarded)
    assert status == 200
    cookie = headers["Set-Cookie"]
    assert "Secure" in cookie
    token = cookie.split(";")[0].partition("=")[2]
    status, headers, _ = proxied_board.call(
        "POST",
        "/action/cancel",
        {**forwarded, "Origin": "https://ops.example.com", "Cookie": f"durable_csrf={token}"},
        {"id": pending_run.id, "csrf_token": token},
    )
    assert status == 303, headers
    assert pending_run.status().value == "CANCELLED"


def test_the_proxys_own_host_is_not_answered(proxied_board):
    """Only the allowed public name: the address the proxy talks to is not one."""
    status, _, body = proxied_board.call("GET", "/")
    assert status == 400 and "127.0.0.1" in body


def test_every_interface_without_authentication_is_refused(basic_app):
    done = celery("durable", "dashboard", "--address=0.0.0.0", f"--port={free_port()}")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "refusing to serve the dashboard on 0.0.0.0 without authentication" in done.stderr
    assert "--basic-auth" in done.stderr and "--allow-unauthenticated" in done.stderr
