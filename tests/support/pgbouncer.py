"""A real PgBouncer (Debian's package) in transaction pooling mode, in front of the test
Postgres: a subprocess with its own config in a temp dir, on a free port.

Tests that need it take the ``pgbouncer`` fixture (import it into the test module); they
are skipped, saying why, when the ``pgbouncer`` binary is not installed
(``apt-get install -y pgbouncer``; ``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from .services import PG_URL

BINARY_PATHS = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def find_binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (path for path in BINARY_PATHS if os.access(path, os.X_OK)), None
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PgBouncer:
    """One PgBouncer subprocess; ``url`` is the test database through it."""

    def __init__(self, binary: str, upstream: str = PG_URL) -> None:
        target = make_url(upstream)
        self.database = target.database or "test"
        self.user = target.username or "postgres"
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        # PgBouncer refuses to run as root: it switches to an ordinary user (-u), who must
        # be able to read its config.
        self.dir.chmod(0o755)
        (self.dir / "userlist.txt").write_text(f'"{self.user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{self.database} = host={target.host or '127.0.0.1'} port={target.port or 5432} "
            f"dbname={self.database}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            "default_pool_size = 10\n"
            "max_client_conn = 500\n"
        )
        for name in ("userlist.txt", "pgbouncer.ini"):
            (self.dir / name).chmod(0o644)
        self.log_path = self.dir / "pgbouncer.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        command = [binary, str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "postgres"]
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.url = f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def log(self, since: int = 0) -> str:
        """PgBouncer's log, from character ``since`` (a ``len(log())`` taken earlier)."""
        return self.log_path.read_text(errors="replace")[since:]

    def wait_ready(self, timeout: float = 15.0) -> PgBouncer:
        conninfo = f"host=127.0.0.1 port={self.port} user={self.user} dbname={self.database}"
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"pgbouncer exited (rc {self.proc.returncode}):\n{self.log()}")
            try:
                with psycopg.connect(conninfo, connect_timeout=2, prepare_threshold=None) as c:
                    c.execute("SELECT 1")
                return self
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"pgbouncer not ready:\n{self.log()}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(name="pgbouncer", scope="module")
def pgbouncer_fixture() -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling mode in front of the test database (``pgbouncer``;
    import ``pgbouncer_fixture`` into a test module to use it)."""
    binary = find_binary()
    if binary is None:
        pytest.skip("pgbouncer is not installed (apt-get install -y pgbouncer)")
    bouncer = PgBouncer(binary)
    try:
        yield bouncer.wait_ready()
    finally:
        bouncer.stop()
