"""Where an example keeps its files: one temp directory per run, removed when it ends, with
Celery's file broker in it; and the workers an example's driver starts.

``python examples/<name>.py`` (the driver) makes the directory, hands it to the workers it
starts through an environment variable, and removes it at exit. Every other process that
imports the example (its workers) only reads that variable, so a run leaves nothing
behind. A directory given in the variable by whoever starts the driver is theirs: kept.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


def data_dir(variable: str, driver: bool) -> Path:
    """The run's directory, from ``variable``; the driver (``driver=True``) makes one
    when the variable is unset and removes it at exit."""
    given = os.environ.get(variable)
    if given:
        return Path(given)
    if not driver:
        raise SystemExit(
            f"{variable} is not set: the example's driver (python examples/...) sets it for "
            "the workers it starts"
        )
    path = tempfile.mkdtemp(prefix="celery-durable-")
    os.environ[variable] = path
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return Path(path)


def spawn_worker(
    app: str,
    variable: str,
    data: Path,
    *options: str,
    env: Mapping[str, str | None] | None = None,
    **popen: Any,
) -> subprocess.Popen[bytes]:
    """Starts ``celery -A app worker OPTIONS`` in the examples' folder, ``data`` handed to it
    in ``variable``, and returns its process (stop it with :func:`stop_workers`).

    ``env`` adds variables to the driver's environment for this worker; a variable given as
    ``None`` is not passed on. ``popen`` goes to :class:`subprocess.Popen` (its own session,
    where its log goes)."""
    environment = {**os.environ, variable: str(data), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "--quiet", "-A", app, "worker", *options],
        cwd=Path(__file__).parent,
        env={name: value for name, value in environment.items() if value is not None},
        **popen,
    )


def stop_workers(*workers: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Warm shutdowns: each worker is asked to stop, then each is waited for, so they stop
    together."""
    for process in workers:
        process.terminate()
    for process in workers:
        process.wait(timeout)


@contextmanager
def worker(
    app: str,
    variable: str,
    data: Path,
    *options: str,
    env: Mapping[str, str | None] | None = None,
    **popen: Any,
) -> Iterator[subprocess.Popen[bytes]]:
    """A worker of the example's app (see :func:`spawn_worker`) for the ``with`` block,
    stopped at its end."""
    process = spawn_worker(app, variable, data, *options, env=env, **popen)
    try:
        yield process
    finally:
        stop_workers(process)


def file_broker(data: Path) -> dict[str, Any]:
    """The transport options of Celery's file broker (``filesystem://localhost/``; a URL
    without a host makes kombu warn on every connection), its folders under ``data``.

    kombu writes a message into the folder in place: the file exists, empty, before its
    bytes are written, and a consumer polling the folder can take it then, fail to decode
    it and stop the worker ("JSONDecodeError: Expecting value"; celery/kombu#1551). Here a
    message is written under a name no consumer reads, then renamed into place, which is
    atomic."""
    filesystem.Channel._put = _put_whole  # noqa: SLF001 - kombu's own method, replaced
    folder = data / "broker"
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(data / "control"),
        # The file broker looks for new messages once a second by default: a demo of hops
        # (signals, timers, items) reads better at a tenth of that.
        "polling_interval": 0.1,
    }


def _put_whole(self: Any, queue: str, payload: Any, **kwargs: Any) -> None:
    name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
    aside = os.path.join(self.data_folder_out, f".writing-{uuid.uuid4()}")
    with open(aside, "wb") as file:
        file.write(str_to_bytes(dumps(payload)))
    os.replace(aside, os.path.join(self.data_folder_out, name))
