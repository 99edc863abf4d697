"""A real Flower process on the test app, for tests of what Flower shows and does."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .waiting import wait_until
from .workers import ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Flower:
    """``celery -A app flower`` on 127.0.0.1 with basic auth; ``api()`` calls its HTTP API."""

    user, password = "ops", "s3cret"

    def __init__(self, app: str) -> None:
        self.port = free_port()
        self.log_path = Path(tempfile.mkstemp(prefix="flower-", suffix=".log")[1])
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                app,
                "flower",
                "--address=127.0.0.1",
                f"--port={self.port}",
                f"--basic-auth={self.user}:{self.password}",
                "--persistent=False",
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

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

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
