"""examples/signup.py, the quickstart's first workflow of your own, as the page runs it:
saved as ``signup.py``, ``durable migrate``, a worker, ``onboarding.delay(...)``; the run
waits on its three-day timer, which a test clock brings forward, and the worker finishes it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import BROKER_URL, delete_queues, unique
from tests.support.workers import ROOT, Worker

GIVEN = (
    'app = Celery("signup", broker=os.environ.get("CELERY_BROKER_URL", '
    '"redis://127.0.0.1:6379/0"))\n'
)
WAIT_THEN_ADVANCE = """
import time, signup
from celery_durable import WorkflowStatus
from celery_durable.testing import Clock
handle = signup.durable.get_handle({run_id!r})
deadline = time.monotonic() + 60
while handle.status() is not WorkflowStatus.WAITING:
    assert time.monotonic() < deadline, handle.status()
    time.sleep(0.05)
print("waiting:", [step.name for step in handle.steps()])
print("woken:", Clock([signup.durable]).advance(3 * 24 * 3600))
print("result:", handle.get(timeout=60))
"""


@pytest.mark.broker
def test_signup_waits_three_days_on_a_timer_then_sends_the_second_email(tmp_path: Path):
    source = (ROOT / "examples" / "signup.py").read_text()
    assert GIVEN in source
    queue = unique("signup-")
    # The queue is the test's own, so that no other worker on the broker takes its run.
    (tmp_path / "signup.py").write_text(
        source.replace(GIVEN, GIVEN + f"app.conf.task_default_queue = {queue!r}\n")
    )
    env = {
        **{k: "" for k in os.environ if k.startswith("CELERY_DURABLE_")},
        # The worker runs from the checkout: the store is named, not the working directory's.
        "CELERY_DURABLE_DATABASE_URL": f"sqlite:///{tmp_path}/signup.sqlite3",
        "CELERY_BROKER_URL": BROKER_URL,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),  # signup, and this checkout
    }

    def run(*command: str) -> str:
        done = subprocess.run(
            [sys.executable, *command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, **env},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    try:
        assert "created" in run("-m", "celery", "-A", "signup", "durable", "migrate")
        worker = Worker("signup", env, queues=queue, name=unique("signup"), concurrency=1)
        try:
            worker.wait_ready()
            start = "import signup; print(signup.onboarding.delay('ada@example.com').id)"
            run_id = run("-c", start).strip()
            printed = run("-c", WAIT_THEN_ADVANCE.format(run_id=run_id)).splitlines()
            assert printed == [
                "waiting: ['signup.send_email', 'celery_durable.sleep']",
                "woken: 1",
                "result: ['welcome-sent', 'tips-sent']",
            ], worker.log()
            assert "sending tips to ada@example.com" in worker.log()
        finally:
            worker.stop()
    finally:
        delete_queues(BROKER_URL, [queue])
