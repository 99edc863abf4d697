"""Each documented install, in a fresh venv without the test extra, runs a real worker and
one workflow to the end (``.ci/run`` runs this: ``python -m tests.extras_check``).

The test extra pulls in what an extra may forget (pytest brings ``packaging``, which
kombu's Redis transport imports), so only a venv holding the package and one extra shows
that the extra is complete. The combinations are the README's:

- ``[postgres,redis]``: Postgres store, Redis broker (tests/extras_app.py);
- ``[postgres]``: Postgres store, RabbitMQ broker (tests/extras_app.py);
- the base install: ``python examples/quickstart.py`` as the README gives it, a SQLite
  store and kombu's file broker, which is what a base install has to offer without
  another server; then ``[dashboard,metrics,tracing]`` on top of it, each feature used
  once (``python extras_app.py features``: SQLite, no broker needed).

pip takes packages from its configured index and its cache; the venvs live in a temp
dir, removed at the end. Any failure prints the step's output and exits 1.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from celery_durable.core.config import default_signal_queue
from tests.support.services import (
    AMQP_URL,
    PG_URL,
    REDIS_URL,
    delete_queues,
    drop_tables,
    unique,
)

ROOT = Path(__file__).resolve().parents[1]
APP = Path(__file__).with_name("extras_app.py")
EXPECTED = "result: {'receipt': 'receipt-42-1999'}"
QUICKSTART_EXPECTED = "times each step ran: {'reserve': 1, 'charge': 2, 'ship': 1}"


class CheckFailed(Exception):
    pass


@dataclass(frozen=True)
class Combo:
    extras: str  # "" for the base install
    broker_url: str | None  # None: the base install runs examples/quickstart.py

    @property
    def label(self) -> str:
        return f"[{self.extras}]" if self.extras else "base install"


COMBOS = [
    Combo("postgres,redis", REDIS_URL),
    Combo("postgres", AMQP_URL),
    Combo("", None),
]


def venv_env(venv: Path) -> dict[str, str]:
    """A user's shell with only the venv activated: none of this process's Python or
    durable settings leak in."""
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run(what: str, command: list[str], env: dict[str, str], cwd: Path, timeout: float) -> str:
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(
            f"{what}: timed out after {timeout:.0f} s\n{exc.stdout}{exc.stderr}"
        ) from None
    if done.returncode != 0:
        raise CheckFailed(f"{what}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.stdout


def install(combo: Combo, where: Path) -> tuple[Path, dict[str, str]]:
    venv = where / "venv"
    run("python -m venv", [sys.executable, "-m", "venv", str(venv)], os.environ.copy(), where, 60)
    env = venv_env(venv)
    spec = f"{ROOT}[{combo.extras}]" if combo.extras else str(ROOT)
    # As the README has it: an editable install of the checkout.
    run(
        f"pip install -e {combo.label}",
        [str(venv / "bin/pip"), "install", "-q", "-e", spec],
        env,
        where,
        300,
    )
    return venv, env


def check_app(combo: Combo, where: Path, venv: Path, env: dict[str, str], say: list[str]) -> None:
    assert combo.broker_url is not None
    shutil.copy(APP, where / "extras_app.py")
    prefix = unique("x")[:9] + "_"
    queue = unique("extras-")
    env = {
        **env,
        "CELERY_BROKER_URL": combo.broker_url,
        "CELERY_DURABLE_DATABASE_URL": PG_URL,
        "CELERY_DURABLE_TABLE_PREFIX": prefix,
        "CELERY_DURABLE_NAMESPACE": queue,
        "CELERY_DURABLE_POLL_INTERVAL": "0.2",
        "EXTRAS_QUEUE": queue,
    }
    celery = str(venv / "bin/celery")
    log_path = where / "worker.log"
    worker: subprocess.Popen[bytes] | None = None
    try:
        say.append(
            run(
                "durable migrate",
                [celery, "-A", "extras_app", "durable", "migrate"],
                env,
                where,
                120,
            ).strip()
        )
        with log_path.open("w") as log:
            worker = subprocess.Popen(
                [
                    celery,
                    "-A",
                    "extras_app",
                    "worker",
                    "-P",
                    "prefork",
                    "-c",
                    "1",
                    "-n",
                    f"{queue}@%h",
                    "--loglevel=INFO",
                    "--without-gossip",
                    "--without-mingle",
                ],
                cwd=where,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while " ready." not in log_path.read_text(errors="replace"):
            if worker.poll() is not None:
                raise CheckFailed(f"worker exited at start (exit {worker.returncode})")
            if time.monotonic() > deadline:
                raise CheckFailed("worker not ready after 60 s")
            time.sleep(0.1)
        printed = run("the workflow", [str(venv / "bin/python"), "extras_app.py"], env, where, 120)
        if EXPECTED not in printed:
            raise CheckFailed(f"the workflow printed {printed!r}, not {EXPECTED!r}")
        say.append(printed.strip())
    except CheckFailed as exc:
        raise CheckFailed(
            f"{exc}\nworker log:\n{log_path.read_text(errors='replace')}"
            if log_path.exists()
            else str(exc)
        ) from None
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
        drop_tables(PG_URL, prefix)
        delete_queues(combo.broker_url, [queue, default_signal_queue(queue)])


def check_quickstart(where: Path, venv: Path, env: dict[str, str], say: list[str]) -> None:
    printed = run(
        "python examples/quickstart.py",
        [str(venv / "bin/python"), str(ROOT / "examples/quickstart.py")],
        env,
        where,
        240,
    )
    if QUICKSTART_EXPECTED not in printed:
        raise CheckFailed(f"quickstart printed {printed!r}, not {QUICKSTART_EXPECTED!r}")
    say.append(printed.strip().splitlines()[-1])
    features = "dashboard,metrics,tracing"
    run(
        f"pip install -e [{features}]",
        [str(venv / "bin/pip"), "install", "-q", "-e", f"{ROOT}[{features}]"],
        env,
        where,
        300,
    )
    shutil.copy(APP, where / "extras_app.py")
    env = {
        **env,
        "CELERY_BROKER_URL": "memory://",
        "CELERY_DURABLE_DATABASE_URL": f"sqlite:///{where}/features.sqlite3",
        "EXTRAS_QUEUE": "features",
    }
    say.append(
        run(
            f"[{features}]",
            [str(venv / "bin/python"), "extras_app.py", "features"],
            env,
            where,
            120,
        ).strip()
    )


def check(combo: Combo, where: Path) -> tuple[bool, list[str]]:
    """Install ``combo`` under ``where`` and run it; whether it worked, and what it said."""
    say = [f"== {combo.label}: fresh venv, worker, one workflow"]
    started = time.monotonic()
    where.mkdir()
    try:
        venv, env = install(combo, where)
        if combo.broker_url is None:
            check_quickstart(where, venv, env, say)
        else:
            check_app(combo, where, venv, env, say)
    except CheckFailed as exc:
        say.append(f"FAILED {combo.label}: {exc}")
        return False, say
    say.append(f"ok {combo.label} ({time.monotonic() - started:.0f} s)")
    return True, say


def main() -> int:
    # One after the other: on 2 cores, three pip installs and workers at once took longer.
    failed = []
    with tempfile.TemporaryDirectory(prefix="celery-durable-extras-") as tmp:
        for n, combo in enumerate(COMBOS):
            ok, said = check(combo, Path(tmp) / str(n))
            print("\n".join(said), flush=True)
            if not ok:
                failed.append(combo.label)
    if failed:
        print(f"extras check FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"extras check: {len(COMBOS)} installs ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
