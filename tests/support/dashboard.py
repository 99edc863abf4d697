"""A real ``celery -A app durable dashboard`` process, and plain HTTP calls to it.

Example::

    board = Dashboard("tests.apps.basic", "--read-only").wait_ready()
    status, body = board.get("/")
"""

from __future__ import annotations

import base64
import importlib
import os
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from .flower import free_port
from .waiting import wait_until
from .workers import CeleryProcess


class Dashboard(CeleryProcess):
    """The dashboard of ``app`` on 127.0.0.1 and a free port, with basic auth."""

    user, password = "ops", "s3cret"

    def __init__(self, app: str, *options: str, env: Mapping[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            "durable",
            "dashboard",
            f"--port={self.port}",
            f"--basic-auth={self.user}:{self.password}",
            *options,
        ]
        super().__init__(app, command, env or {}, "dashboard")

    def wait_ready(self, timeout: float = 60.0) -> Dashboard:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the dashboard exited early:\n{self.log()}")
            try:
                return self.get("/")[0] == 200
            except OSError:
                return False

        wait_until(up, timeout, 0.2, lambda: f"the dashboard to answer; log:\n{self.log()}")
        return self

    def get(self, path: str, password: str | None = None) -> tuple[int, str]:
        """``(status, body)`` of a GET with basic auth (``password`` overrides ours)."""
        pair = f"{self.user}:{password or self.password}".encode()
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": "Basic " + base64.b64encode(pair).decode()}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


CHROMIUM = "/usr/bin/chromium"


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (whose own download doesn't work here);
    skipped without either, naming what installs it, except under CI=true, where it fails."""
    if os.environ.get("CI") == "true":
        playwright_api: Any = importlib.import_module("playwright.sync_api")
    else:
        playwright_api = pytest.importorskip("playwright.sync_api")
        if not os.path.exists(CHROMIUM):
            pytest.skip(f"no {CHROMIUM}: apt-get install -y chromium")
    with playwright_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()
