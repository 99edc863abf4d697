"""The README's examples work as written: SQLite store, file broker, real worker processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.examples import run_example
from tests.support.services import BROKER_URL, delete_queues, unique
from tests.support.workers import ROOT, Worker


def test_quickstart_resumes_after_a_crash(tmp_path):
    printed = run_example("quickstart.py", tmp_path)
    assert "result: {'receipt': 'receipt-42-1999', 'parcel': 'parcel-42'}" in printed
    assert "times each step ran: {'reserve': 1, 'charge': 2, 'ship': 1}" in printed


def test_steps_example_retries_defers_and_fails_for_good(tmp_path):
    printed = run_example("steps.py", tmp_path)
    assert (
        "o-1 result: {'receipt': 'charged 1375 (idempotency key order-o-1)', "
        "'parcel': 'parcel-o-1'}"
    ) in printed
    # fetch_rate retried in-process; the run's second attempt replayed all but ship.
    assert "o-1 calls: {'fetch_rate': 3, 'charge': 1, 'ship': 2}; run attempts: 2" in printed
    assert (
        "o-1 steps: [(0, 'fetch_rate', 'ok', 1), (1, 'to_cents', 'ok', 1), "
        "(2, 'check_card', 'ok', 1), (3, 'charge', 'ok', 1), (4, 'ship', 'ok', 2)]"
    ) in printed
    assert "o-2 failed: celery_durable.errors.PermanentError: card expired" in printed
    assert "o-2 attempts: 1 of 3" in printed


def test_approval_example_signals_queries_timers_and_cancel(tmp_path):
    printed = run_example("approval.py", tmp_path)
    assert "b-1 is WAITING; query: {'stage': 'awaiting approval'}" in printed
    assert (
        "b-1 result: {'status': 'confirmed', 'receipt': 'receipt-b-1'}; "
        "query: {'stage': 'approved', 'by': 'alice'}"
    ) in printed
    assert "b-2 cancelled: customer left" in printed


def test_fanout_example_maps_routes_gathers_and_starts_a_child(tmp_path):
    printed = run_example("fanout.py", tmp_path)
    pages = [f"page-{n}.png by gpu" for n in range(1, 6)]
    assert f"images: {pages}" in printed  # every render ran on the gpu worker, in order
    assert "sizes: [100, 200]; cover: page-0.png by gpu" in printed
    assert "child report-doc-1:5: SUCCEEDED, 'shipped doc-1'" in printed
    assert "step 1 items: [(0, 'ok'), (1, 'ok'), (2, 'ok'), (3, 'ok'), (4, 'ok')]" in printed


def test_subscription_example_continues_patches_and_compensates(tmp_path):
    printed = run_example("subscription.py", tmp_path)
    assert "period 1 on v1: {'period': 1, 'paid': 1000, 'last': 'charge-alice-1'}" in printed
    # Period 1 replayed on v2 without the marker (1000), periods 2 and 3 took the tax (1200).
    assert "alice: {'periods': 3, 'paid': 3400}" in printed
    assert "generation 2, continued from sub-alice@1" in printed
    assert "mallory failed: no delivery address" in printed
    assert "mallory: compensated, compensations [('charge', 'ok')]" in printed


def test_saga_example_compensates_from_the_body_and_on_cancel(tmp_path):
    printed = run_example("saga.py", tmp_path)
    assert "t-1: {'status': 'declined', 'undone': ['book_hotel', 'book_flight']}" in printed
    assert "t-2 cancelled: traveller changed plans; compensated" in printed
    assert "t-2 compensations: [('book_hotel', 1, 'ok'), ('book_flight', 0, 'ok')]" in printed
    assert (
        "t-3: {'status': 'booked', 'flight': 'flight-t-3', 'hotel': 'hotel-t-3'}; compensations: []"
    ) in printed
    # Each compensation ran once, latest first; the confirmed trip kept its bookings.
    assert (
        "undone: ['cancelled hotel-t-1', 'cancelled flight-t-1', "
        "'cancelled hotel-t-2', 'cancelled flight-t-2']"
    ) in printed


def readme_first_example() -> str:
    """The README's first Python snippet, as a user saves it to ``shop.py``."""
    readme = (ROOT / "README.md").read_text()
    return readme.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.broker
def test_the_readmes_first_example_saved_as_shop_py_migrates_and_a_worker_runs_it(tmp_path):
    snippet = readme_first_example()
    database = tmp_path / "shop.sqlite3"
    queue = unique("readme-")
    # The user's Postgres and Redis become a SQLite file and this session's broker; the
    # queue is the test's own, so that no other worker on the broker takes its run.
    for given, ours in (
        (
            'app = Celery("shop", broker="redis://127.0.0.1:6379/0")\n',
            f"app = Celery('shop', broker={BROKER_URL!r})\n"
            f"app.conf.task_default_queue = {queue!r}\n",
        ),
        ('"postgresql+psycopg://postgres@127.0.0.1/shop"', repr(f"sqlite:///{database}")),
    ):
        assert given in snippet
        snippet = snippet.replace(given, ours)
    (tmp_path / "shop.py").write_text(snippet)
    env = {
        **{k: "" for k in os.environ if k.startswith("CELERY_DURABLE_")},
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
        assert run("-c", "import shop") == ""
        assert not database.exists()  # importing it touched no store and started no run
        assert "created" in run("-m", "celery", "-A", "shop", "durable", "migrate")
        worker = Worker("shop", env, queues=queue, name=unique("readme"), concurrency=1)
        try:
            worker.wait_ready()
            printed = run("shop.py").splitlines()
            assert printed == ["{'receipt': 'receipt-42-1999'}", "SUCCEEDED"], worker.log()
        finally:
            worker.stop()
    finally:
        delete_queues(BROKER_URL, [queue])


def test_streams_example_reads_live_and_resumes_from_an_offset(tmp_path):
    printed = run_example("streams.py", tmp_path)
    assert "token 0: durable\n" in printed and "token 4: token\n" in printed
    assert "token 5:" not in printed  # the first reader went away after offset 4
    assert "resumed at offset 5: a step writes in order with its offset" in printed
    assert "progress: [{'stage': 'generating'}, {'stage': 'done', 'words': 13}]" in printed
    assert (
        "result: durable streams keep every token a step writes in order with its offset"
    ) in printed


def test_updates_example_answers_rejects_refuses_and_checks_out(tmp_path):
    printed = run_example("updates.py", tmp_path)
    assert "apple: {'items': ['apple'], 'total': 3}" in printed
    assert "pear: {'items': ['apple', 'pear'], 'total': 7}" in printed
    assert "pear again: {'items': ['apple', 'pear'], 'total': 7}" in printed
    assert "pear: rejected: pear is in the cart already" in printed
    assert "kiwi: rejected: we don't sell 'kiwi'" in printed
    assert "checkout: {'items': ['apple', 'pear'], 'total': 7}" in printed
    assert "result: {'items': ['apple', 'pear'], 'total': 7}" in printed
    # The refused kiwi left no step; the rejected pear did.
    assert (
        "steps: ['update', 'price_of', 'update_reply', 'update', 'price_of', 'update_reply', "
        "'update', 'update_reject', 'update', 'update_reply']"
    ) in printed
