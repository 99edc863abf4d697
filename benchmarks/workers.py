"""Benchmark worker subprocesses and deadline-bounded polling."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from tests.support import waiting
from tests.support.workers import celery_command, worker_arguments

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
APP_MODULE = "benchmarks.app"


def worker_command(name: str, pool: str = "prefork", concurrency: int = 2) -> list[str]:
    """The one worker command line every compared system runs with; the scale figures vary
    only the pool and its concurrency."""
    arguments = worker_arguments(name, pool=pool, concurrency=concurrency, loglevel="WARNING")
    return celery_command(APP_MODULE, arguments)


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    interval: float = 0.01,
    what: str | Callable[[], str] = "condition",
) -> T:
    """Return the first truthy ``condition()``; raise TimeoutError after ``timeout`` s (the
    tests' helper, with the error a benchmark catches to record a miss and go on)."""
    return waiting.wait_until(condition, timeout, interval, what, error=TimeoutError)


class WorkerProcess:
    """One ``celery worker`` in its own session (process group); logs to ``log_path``."""

    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        log_dir: Path,
        pool: str = "prefork",
        concurrency: int = 2,
    ) -> None:
        self.name = name
        self.command = worker_command(name, pool, concurrency)
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> WorkerProcess:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited early:\n{self.log()[-4000:]}")
            return " ready." in self.log()

        wait_until(ready, timeout, 0.05, lambda: f"worker {self.name}; log:\n{self.log()[-4000:]}")
        return self

    def children(self) -> list[int]:
        """Pids of the pool processes (for py-spy)."""
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        try:
            return [int(pid) for pid in path.read_text().split()]
        except OSError:
            return []

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process group (warm shutdown), SIGKILL it after ``timeout`` s."""
        try:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            # Whatever is left of the group (pool children) goes too.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        finally:
            self._log.close()
