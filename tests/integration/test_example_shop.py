"""examples/shop.py, the first deployment's program, as docs/tutorial/first-deployment.md
runs it: saved as ``shop.py``, on Postgres and this session's broker, ``durable migrate``,
a worker with events on, ``python shop.py``, then ``durable list`` and ``durable show``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import BROKER_URL, PG_URL, delete_queues, drop_tables, unique
from tests.support.workers import ROOT, Worker

GIVEN = (
    'app = Celery("shop", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))\n'
)


@pytest.mark.broker
def test_the_shop_migrates_runs_on_a_worker_and_durable_list_and_show_tell(tmp_path: Path):
    source = (ROOT / "examples" / "shop.py").read_text()
    assert GIVEN in source
    queue = unique("shop-")
    # The queue is the test's own, so that no other worker on the broker takes its run.
    ours = GIVEN + f"app.conf.task_default_queue = {queue!r}\n"
    (tmp_path / "shop.py").write_text(source.replace(GIVEN, ours))
    prefix = unique("s")[:9] + "_"
    env = {
        **{k: "" for k in os.environ if k.startswith("CELERY_DURABLE_")},
        "CELERY_DURABLE_DATABASE_URL": PG_URL,
        "CELERY_DURABLE_TABLE_PREFIX": prefix,
        "CELERY_BROKER_URL": BROKER_URL,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),  # shop, and this checkout
    }

    def run(*command: str) -> str:
        done = subprocess.run(
            [sys.executable, *command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    try:
        assert "created" in run("-m", "celery", "-A", "shop", "durable", "migrate")
        worker = Worker(
            "shop", env, queues=queue, name=unique("shop"), concurrency=1, extra=("-E",)
        )
        try:
            worker.wait_ready()
            printed = run("shop.py").splitlines()
            assert printed == ["{'receipt': 'receipt-42-1999'}", "SUCCEEDED"], worker.log()
        finally:
            worker.stop()
        listed = run("-m", "celery", "-A", "shop", "durable", "list", "--status", "succeeded")
        assert "shop.checkout" in listed and "SUCCEEDED" in listed, listed
        run_id = next(word for word in listed.split() if word.count("-") >= 4)
        shown = run("-m", "celery", "-A", "shop", "durable", "show", run_id)
        assert "shop.reserve" in shown and "shop.charge" in shown, shown
    finally:
        drop_tables(PG_URL, prefix)
        delete_queues(BROKER_URL, [queue])
