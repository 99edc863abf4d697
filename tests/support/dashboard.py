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
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

import celery_durable as cd

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

    def wait_ready(
        self, timeout: float = 60.0, probe: Callable[[], bool] | None = None
    ) -> Dashboard:
        """Once ``probe()`` (a GET of the runs page answered 200) is true."""

        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the dashboard exited early:\n{self.log()}")
            try:
                return probe() if probe is not None else self.get("/")[0] == 200
            except OSError:
                return False

        wait_until(up, timeout, 0.2, lambda: f"the dashboard to answer; log:\n{self.log()}")
        return self

    def get(self, path: str, password: str | None = None) -> tuple[int, str]:
        """``(status, body)`` of a GET with basic auth (``password`` overrides ours)."""
        status, _, body = self.call("GET", path, password=password)
        return status, body

    def call(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str] | None = None,
        form: Mapping[str, str] | None = None,
        password: str | None = None,
    ) -> tuple[int, Any, str]:
        """``(status, headers, body)`` of a request with basic auth and ``headers`` (a
        ``Host`` among them is sent as given); ``form``: a form-encoded body. Redirects
        are not followed."""
        pair = f"{self.user}:{password or self.password}".encode()
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if form is None else urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": "Basic " + base64.b64encode(pair).decode(),
                **(headers or {}),
            },
        )
        try:
            with _NO_REDIRECTS.open(request, timeout=10) as response:
                return response.status, response.headers, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.read().decode()


class _Unredirected(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 303 after an action is the answer looked at


_NO_REDIRECTS = urllib.request.build_opener(_Unredirected)


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


def held_run(durable: Any) -> Any:
    """A run ``held-1`` of ``durable`` that waits for the signal ``go``, for the
    dashboard's in-process tests to act on."""

    @durable.workflow
    def held() -> Any:
        return cd.wait_for_signal("go")

    return held.apply_async((), run_id="held-1")
