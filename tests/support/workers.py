"""Real ``celery worker`` subprocesses (``-P prefork`` unless told), each in its own process
group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from .waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def clean_env() -> dict[str, str]:
    """This process's environment without the test session's ``CELERY_DURABLE_*`` settings
    (conftest sets them for the test app): for a subprocess that must configure itself,
    as the examples and the benchmark suite do."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CELERY_DURABLE_")}


def celery_command(app: str, arguments: Sequence[str]) -> list[str]:
    """``python -m celery -A app <arguments...>`` with this interpreter."""
    return [sys.executable, "-m", "celery", "-A", app, *arguments]


def worker_arguments(
    name: str,
    *,
    queues: str | None = None,
    pool: str = "prefork",
    concurrency: int = 2,
    loglevel: str = "INFO",
    extra: Sequence[str] = (),
) -> list[str]:
    """``worker`` and its options as every worker here runs (the tests', the benchmarks'
    and the chaos suite's): node ``name@%h``, no gossip, mingle or heartbeat."""
    arguments = ["worker", "-P", pool, "-c", str(concurrency)]
    if queues is not None:
        arguments += ["-Q", queues]
    arguments += ["-n", f"{name}@%h", f"--loglevel={loglevel}"]
    return [*arguments, "--without-gossip", "--without-mingle", "--without-heartbeat", *extra]


class CeleryProcess:
    """``python -m celery -A app <command...>`` in its own process group, logging to a file."""

    def __init__(self, app: str, command: list[str], env: Mapping[str, str], label: str) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix=f"{label}-", suffix=".log")[1])
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()/kill()
        self.proc = subprocess.Popen(
            celery_command(app, command),
            cwd=ROOT,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the main process and every child at once, children that outlived an
        exited main process too (they stay in its process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the whole group is gone
        self.proc.wait(10)
        self._log.close()

    def wait_exit(self, timeout: float) -> int:
        """The exit code, once the main process exits within ``timeout`` s; else fail
        with what its process group is doing and the end of its log."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            listing = subprocess.run(
                ["ps", "-o", "pid,stat,wchan:32,etime,args", "-g", str(self.proc.pid)],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            tail = "\n".join(self.log().splitlines()[-60:])
            raise AssertionError(
                f"pid {self.proc.pid} did not exit within {timeout}s; its process group:\n"
                f"{listing}\nthe end of its log:\n{tail}"
            ) from None

    def stop(self, timeout: float = 30.0) -> None:
        """Warm shutdown (SIGTERM); SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        else:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()


class Worker(CeleryProcess):
    """One worker subprocess; ``kill()`` SIGKILLs its whole process group (main + children)."""

    def __init__(
        self,
        app: str,
        env: Mapping[str, str],
        *,
        queues: str,
        name: str,
        concurrency: int = 2,
        extra: tuple[str, ...] = (),
        pool: str = "prefork",
    ) -> None:
        command = worker_arguments(
            name, queues=queues, pool=pool, concurrency=concurrency, extra=extra
        )
        super().__init__(app, command, env, f"worker-{name}")

    def wait_ready(self, timeout: float = 60.0) -> Worker:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited early:\n{self.log()}")
            return " ready." in self.log()

        wait_until(ready, timeout, 0.1, lambda: f"worker ready; log:\n{self.log()}")
        return self
