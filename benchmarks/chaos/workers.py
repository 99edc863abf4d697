"""Chaos worker subprocesses, and the broker/database housekeeping of a chaos run.

Each worker is ``celery -A benchmarks.chaos.app worker -P prefork -c 2`` in a process group
of its own, so a kill or a pause hits the main process and its pool children at once. A
worker that exits without the suite having killed or stopped it is a *self-exit*.

Example::

    worker = ChaosWorker(0, "ab12cd34", env, Path("/tmp/logs"), "chaos.q")
    worker.start()
    worker.pause(); worker.resume(); worker.kill(); worker.start()
    worker.self_exit()      # None while it runs or after the suite killed it
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
import redis

from tests.support.workers import celery_command, worker_arguments

ROOT = Path(__file__).resolve().parents[2]
APP_MODULE = "benchmarks.chaos.app"
PRIORITY_SEP = "\x06\x16"  # kombu's Redis priority-queue key separator
PRIORITY_STEPS = (3, 6, 9)
# Log lines worth counting in a report; the first three mean a pool child died on its own.
LOG_PATTERNS = {
    "pool_child_lost": r"exited with 'exitcode|WorkerLostError|exited with 'signal",
    "unrecoverable": r"Unrecoverable error",
    "traceback": r"^Traceback",
    "lease_lost": r"lost its lease",
    "dispatched_again": r"dispatched workflow \S+ run \S+ again",
    "woken_for_stored_signal": r"for a stored signal",
    "store_failed": r"the store failed|sweep failed|lease heartbeat failed",
    "not_claimed": r"not claimed",
    "broker_lost": r"Connection to broker lost|consumer: Cannot connect",
    "signal_refused": r"refused and kept",
}


def worker_command(name: str, queue: str) -> list[str]:
    return celery_command(APP_MODULE, worker_arguments(name, queues=queue))


@dataclass
class SelfExit:
    worker: str
    returncode: int | None
    at: float
    log_tail: str


class ChaosWorker:
    """One worker slot; ``start()`` again after a kill starts its next generation."""

    def __init__(
        self, index: int, run_id: str, env: Mapping[str, str], log_dir: Path, queue: str
    ) -> None:
        self.index = index
        self.run_id = run_id
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.log_dir = log_dir
        self.queue = queue
        self.generation = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_paths: list[Path] = []
        self.paused = False
        self._expected_exit = False
        self._log: IO[str] | None = None
        self.started = 0.0

    @property
    def name(self) -> str:
        return f"chaos{self.index}g{self.generation}-{self.run_id}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> ChaosWorker:
        self._close_log()
        self.generation += 1
        path = self.log_dir / f"{self.name}.log"
        self.log_paths.append(path)
        self._log = open(path, "w")  # noqa: SIM115 - closed by _close_log()
        self._expected_exit = False
        self.paused = False
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            worker_command(self.name, self.queue),
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        return self

    def pids(self) -> set[int]:
        """The main process and its pool children."""
        if not self.alive or self.proc is None:
            return set()
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        try:
            return {self.proc.pid, *(int(pid) for pid in path.read_text().split())}
        except OSError:
            return {self.proc.pid}

    def log(self) -> str:
        return self.log_paths[-1].read_text(errors="replace") if self.log_paths else ""

    def ready(self) -> bool:
        return self.alive and " ready." in self.log()

    def _signal_group(self, sig: int) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL the main process and every pool child at once."""
        self._expected_exit = True
        self._signal_group(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)
        self.paused = False

    def pause(self) -> None:
        self._signal_group(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)
        self.paused = False

    def self_exit(self, now: float) -> SelfExit | None:
        """The exit of a worker the suite did not kill or stop, once (then forgotten)."""
        if self.proc is None or self._expected_exit or self.proc.poll() is None:
            return None
        self._expected_exit = True  # report it once
        return SelfExit(self.name, self.proc.returncode, now, self.log()[-3000:])

    def stop(self, timeout: float = 20.0) -> int | None:
        """Warm shutdown (SIGTERM to the main process), then SIGKILL what is left."""
        rc = None
        if self.proc is not None:
            self._expected_exit = True
            if self.paused:
                self.resume()
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    rc = self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    rc = None
            else:
                rc = self.proc.returncode
            self._signal_group(signal.SIGKILL)
            self.proc.wait(10)
        self._close_log()
        return rc

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def count_log_lines(paths: Iterable[Path]) -> dict[str, int]:
    """How often each of ``LOG_PATTERNS`` occurs in the workers' logs."""
    counts = dict.fromkeys(LOG_PATTERNS, 0)
    compiled = {name: re.compile(rx, re.MULTILINE) for name, rx in LOG_PATTERNS.items()}
    for path in paths:
        text = path.read_text(errors="replace") if path.exists() else ""
        for name, rx in compiled.items():
            counts[name] += len(rx.findall(text))
    return counts


def pool_child_exits(paths: Iterable[Path]) -> list[str]:
    """Log lines saying a pool child died (the suite only kills whole process groups)."""
    rx = re.compile(LOG_PATTERNS["pool_child_lost"])
    found = []
    for path in paths:
        text = path.read_text(errors="replace") if path.exists() else ""
        found += [f"{path.name}: {line}" for line in text.splitlines() if rx.search(line)]
    return found


# -- the broker ------------------------------------------------------------------------------


def redis_keys_of(queues: Iterable[str]) -> list[str]:
    """Every Redis key kombu keeps for these queues (the chaos app puts unacked per queue)."""
    keys = []
    for queue in queues:
        keys += [queue, *(f"{queue}{PRIORITY_SEP}{p}" for p in PRIORITY_STEPS)]
        keys += [f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}"]
        keys += [f"{queue}.unacked", f"{queue}.unacked_index", f"{queue}.unacked_mutex"]
    return keys


def drop_redis_state(client: redis.Redis, queues: Iterable[str]) -> int:
    """What a restart of a Redis without persistence loses of this run: queued and unacked
    messages, bindings. Returns the number of messages dropped."""
    keys = redis_keys_of(queues)
    pipe = client.pipeline()
    for key in keys:
        pipe.type(key)
    types = pipe.execute()
    pipe = client.pipeline()
    for key, kind in zip(keys, types, strict=True):
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "list":
            pipe.llen(key)
        elif kind == "hash" and key.endswith(".unacked"):
            pipe.hlen(key)
    dropped = sum(int(n) for n in pipe.execute())
    client.delete(*keys)
    return dropped


def delete_queues(broker_url: str, queues: list[str]) -> None:
    """Remove this run's queues from the broker (RabbitMQ keeps durable queues)."""
    if broker_url.startswith("redis"):
        client = redis.Redis.from_url(broker_url)
        try:
            client.delete(*redis_keys_of(queues))
        finally:
            client.close()
        return
    from kombu.connection import Connection

    with Connection(broker_url, connect_timeout=5) as conn:  # type: ignore[no-untyped-call]
        channel: Any = conn.default_channel
        for name in queues:
            try:
                channel.queue_delete(name)
                channel.exchange_delete(name)
            except Exception:  # noqa: BLE001 - a queue that never existed
                channel = conn.channel()


def drop_tables(libpq_url: str, prefix: str) -> list[str]:
    """Drop this run's tables (their names start with ``prefix``)."""
    with psycopg.connect(libpq_url, autocommit=True, connect_timeout=10) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "AND starts_with(tablename, %s)",
                (prefix,),
            )
        ]
        for name in names:
            conn.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')
    return names
