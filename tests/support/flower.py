"""A real Flower process on the test app, for tests of what Flower shows and does."""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from .waiting import wait_until
from .workers import CeleryProcess


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Flower(CeleryProcess):
    """``celery -A app flower`` on 127.0.0.1 with basic auth; ``api()`` calls its HTTP API."""

    user, password = "ops", "s3cret"

    def __init__(self, app: str) -> None:
        self.port = free_port()
        command = [
            "flower",
            "--address=127.0.0.1",
            f"--port={self.port}",
            f"--basic-auth={self.user}:{self.password}",
            "--persistent=False",
        ]
        super().__init__(app, command, {}, "flower")

    def wait_ready(self, timeout: float = 60.0) -> Flower:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"flower exited early:\n{self.log()}")
            try:
                return self.api("GET", "/healthcheck", raw=True) == "OK"
            except (OSError, urllib.error.URLError):
                return False

        wait_until(up, timeout, 0.2, lambda: f"flower to answer; log:\n{self.log()}")
        return self

    def api(self, method: str, path: str, raw: bool = False) -> Any:
        credentials = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            method=method,
            data=b"" if method == "POST" else None,
            headers={"Authorization": f"Basic {credentials}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read().decode()
        return body if raw else json.loads(body)

    def task(self, task_id: str) -> dict[str, Any] | None:
        """What Flower shows of a task; None before it saw an event of it."""
        try:
            info: dict[str, Any] = self.api("GET", f"/api/task/info/{task_id}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return info

    def capturing(self, start_probe: Callable[[], Any]) -> Flower:
        """Wait until Flower captures events: it answers HTTP before its event consumer is
        up, and events sent before that are lost to it. Probe runs (``start_probe()``
        returns a started run's handle) show when it is."""

        def captures() -> bool:
            probe = start_probe()
            probe.wait(timeout=30)
            try:
                wait_until(lambda: self.task(probe.id), 5, 0.1)
            except AssertionError:
                return False  # sent before Flower listened: probe again
            return True

        wait_until(captures, 60, 0, "Flower to capture a probe run's events")
        return self
