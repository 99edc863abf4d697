"""Takes docs/images/flower-task-waiting.png: Flower's task page of a booking that waits for
a signal.

Needs Postgres and Redis (the test suite's defaults), Flower, Playwright's Python package and
Debian's Chromium (``apt-get install chromium``; no browser download)::

    python docs/tools/flower_screenshot.py

It starts a worker (-E) and Flower on this module's app, starts ``shop.booking`` as
``booking-42``, waits until Flower shows it WAITING, screenshots the task page, then cancels
the run and drops its tables.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from celery import Celery

import celery_durable as cd
from celery_durable import Durable

HERE = Path(__file__).resolve().parent
os.environ.setdefault(
    "CELERY_DURABLE_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
os.environ.setdefault("CELERY_DURABLE_TABLE_PREFIX", "docs_")
os.environ.setdefault("CELERY_DURABLE_NAMESPACE", "docs")

app = Celery("shop", broker=os.environ.get("DOCS_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.task_default_queue = "docs-shop"
durable = Durable(app)


@durable.step(name="shop.reserve")
def reserve(booking_id: str) -> dict:
    return {"booking": booking_id, "amount": 1999}


@durable.step(name="shop.charge")
def charge(booking_id: str, amount: int) -> str:
    return f"receipt-{booking_id}-{amount}"


@durable.workflow(name="shop.booking")
def booking(booking_id: str) -> dict:
    hold = reserve(booking_id)
    decision = cd.wait_for_signal("approval", timeout=86400)
    if decision is None:
        return {"status": "expired"}
    return {"status": "confirmed", "receipt": charge(booking_id, hold["amount"])}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _until(what: str, check, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def _task(port: int, task_id: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/task/info/{task_id}") as r:
            return json.loads(r.read())  # type: ignore[no-any-return]
    except (urllib.error.URLError, OSError):
        return None


def main() -> None:
    durable.migrate()
    env = {**os.environ, "PYTHONPATH": f"{HERE.parent}{os.pathsep}{HERE}"}
    port = _free_port()
    celery = [sys.executable, "-m", "celery", "-A", "flower_screenshot"]
    worker = subprocess.Popen(
        [*celery, "worker", "-E", "-c", "1", "-Q", "docs-shop", "-n", "docs@%h", "-l", "WARNING"],
        cwd=HERE,
        env=env,
    )
    flower = subprocess.Popen(
        [*celery, "flower", "--address=127.0.0.1", f"--port={port}", "--persistent=False"],
        cwd=HERE,
        env={**env, "FLOWER_UNAUTHENTICATED_API": "true"},  # local only: 127.0.0.1
    )
    try:
        _until("Flower", lambda: _healthy(port))
        time.sleep(3)  # Flower's event consumer starts after its web server answers
        handle = booking.apply_async(args=("booking-42",), run_id="booking-42")
        _until("WAITING", lambda: (_task(port, handle.id) or {}).get("state") == "WAITING")
        _screenshot(
            f"http://127.0.0.1:{port}/task/{handle.id}",
            HERE.parent / "images" / "flower-task-waiting.png",
        )
        handle.cancel("screenshot taken")
    finally:
        for process in (worker, flower):
            process.terminate()
            process.wait(30)
        from sqlalchemy import MetaData

        meta = MetaData()
        meta.reflect(durable.runtime.store.engine, only=lambda name, _: name.startswith("docs_"))
        meta.drop_all(durable.runtime.store.engine)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck") as response:
            return bool(response.read() == b"OK")
    except (urllib.error.URLError, OSError):
        return False


def _screenshot(url: str, path: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page(viewport={"width": 1100, "height": 760})
        page.goto(url, wait_until="networkidle")
        page.screenshot(path=str(path), full_page=True)
        browser.close()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
