"""The Django example (``examples/django_shop``) as its README runs it: a copy of the project
in a temp folder, its commands as subprocesses there (``python manage.py ...``,
``celery -A shop worker``, ``python manage.py runserver``), on Postgres (a database of its
own, dropped afterwards) or SQLite (its default ``db.sqlite3``), and HTTP to the server."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.support.django import postgres_database
from tests.support.services import BROKER_URL, PG_URL, delete_queues, unique
from tests.support.waiting import wait_until
from tests.support.workers import ROOT, clean_env

EXAMPLE = ROOT / "examples" / "django_shop"
README = EXAMPLE / "README.md"
# The README's three commands, each in a terminal of its own.
MIGRATE = "python manage.py migrate"
WORKER = "celery -A shop worker -l info"
RUNSERVER = "python manage.py runserver"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def executable(command: str) -> list[str]:
    """A README command as argv, run with this interpreter's environment: ``python`` is
    sys.executable and ``celery`` the script installed next to it."""
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    else:
        beside = Path(sys.executable).parent / argv[0]
        argv[0] = str(beside) if beside.exists() else shutil.which(argv[0]) or argv[0]
    return argv


class Process:
    """A long-running command of the example in its own process group (runserver's
    autoreloader and the worker's pool are children), logging to a file."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], label: str) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix=f"shop-{label}-", suffix=".log")[1])
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.proc.args} exited early:\n{self.log()}")
        return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        else:
            try:  # the autoreloader's child may outlive its parent
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()


class Shop:
    """One copy of the example, configured only by the variables its README lists."""

    def __init__(self, database: str, folder: Path) -> None:
        self.database = database
        self.folder = folder
        self.queue = unique("shop-")
        self.namespace = unique("shop")
        self.pg_name = unique("shop_")
        self.port = free_port()
        url = sa.engine.make_url(PG_URL)
        self.env: dict[str, str] = {
            # None of the session's CELERY_DURABLE_* settings: the example configures itself.
            **clean_env(),
            # This checkout's celery_durable, whatever is installed.
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "CELERY_BROKER_URL": BROKER_URL,
            "SHOP_QUEUE": self.queue,
            # The signal queue follows the namespace: not the default one other projects share.
            "CELERY_DURABLE_NAMESPACE": self.namespace,
        }
        self.env.pop("DJANGO_SETTINGS_MODULE", None)
        if database == "postgres":
            self.env.update(
                {
                    "SHOP_DATABASE": "postgres",
                    "SHOP_PG_NAME": self.pg_name,
                    "SHOP_PG_HOST": url.host or "127.0.0.1",
                    "SHOP_PG_PORT": str(url.port or 5432),
                    "SHOP_PG_USER": url.username or "postgres",
                    "SHOP_PG_PASSWORD": url.password or "",
                }
            )
        else:
            self.env.pop("SHOP_DATABASE", None)
        self.processes: list[Process] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def database_url(self) -> str:
        if self.database == "postgres":
            return PG_URL.rsplit("/", 1)[0] + "/" + self.pg_name
        return f"sqlite:///{self.folder / 'db.sqlite3'}"

    def run(self, command: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*executable(command), *args],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, f"{command} {args}:\n{done.stdout}{done.stderr}"
        return done

    def start(self, command: str, *args: str, label: str) -> Process:
        process = Process([*executable(command), *args], self.folder, self.env, label)
        self.processes.append(process)
        return process

    def start_worker(self) -> Process:
        worker = self.start(WORKER, label="worker")
        wait_until(
            lambda: worker.alive() and " ready." in worker.log(),
            60,
            0.1,
            lambda: f"the worker; its log:\n{worker.log()}",
        )
        return worker

    def start_server(self) -> Process:
        """The README's runserver, on a free port (the README's 8000 may be taken)."""
        server = self.start(RUNSERVER, f"127.0.0.1:{self.port}", label="runserver")

        def answers() -> bool:
            server.alive()
            try:
                self.http("GET", "/orders/0/")
            except OSError:
                return False
            return True

        wait_until(answers, 60, 0.1, lambda: f"the dev server; its log:\n{server.log()}")
        return server

    def http(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """(status, JSON body) of a request to the server; HTTP errors are answers too."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as answer:
            raw = answer.read()
            try:
                return answer.code, json.loads(raw)
            except ValueError:
                return answer.code, raw.decode(errors="replace")

    def durable(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("python manage.py durable", *args, check=check)

    def orders(self) -> list[tuple[int, str]]:
        """(id, status) of every order, read apart from Django."""
        engine = sa.create_engine(self.database_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT id, status FROM orders_order ORDER BY id"))
                return [(int(row[0]), str(row[1])) for row in rows]
        finally:
            engine.dispose()

    def logs(self) -> str:
        return "\n".join(f"--- {p.proc.args}:\n{p.log()}" for p in self.processes)


@contextmanager
def shop(database: str, tmp: Path) -> Iterator[Shop]:
    """A fresh copy of the example (no db.sqlite3, no caches) and, on Postgres, a database
    of its own; its processes killed, its database and queues dropped afterwards."""
    folder = tmp / "django_shop"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("db.sqlite3", "__pycache__"))
    made = Shop(database, folder)
    with postgres_database(made.pg_name if database == "postgres" else None):
        try:
            yield made
        finally:
            for process in made.processes:
                process.kill()
            delete_queues(BROKER_URL, [made.queue, f"celery_durable.signals.{made.namespace}"])
