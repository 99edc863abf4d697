"""examples/fastapi_app.py as its docstring runs it: saved as ``fastapi_app.py``, on
Postgres and this session's broker, ``durable migrate``, a worker, ``uvicorn
fastapi_app:api``, and real HTTP calls: start a run, await its result in one request while
another signals it, in one server process whose event loop no call blocks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from tests.support.event_loop import await_until, run_apart
from tests.support.flower import free_port
from tests.support.pgconns import backends_held_by, named_url
from tests.support.services import BROKER_URL, PG_URL, delete_queues, drop_tables, unique
from tests.support.waiting import wait_until
from tests.support.workers import ROOT, Worker

GIVEN = (
    'app = Celery("fastapi_app", broker=os.environ.get("CELERY_BROKER_URL", '
    '"redis://127.0.0.1:6379/0"))\n'
)


def listening(pid: int, application_name: str) -> bool:
    """Whether process ``pid`` holds a session named ``application_name`` that LISTENs."""
    backends = backends_held_by(pid, application_name)
    if not backends:
        return False
    engine = sa.create_engine(PG_URL)
    try:
        with engine.connect() as conn:
            queries = conn.execute(
                sa.text("SELECT query FROM pg_stat_activity WHERE pid = ANY(:pids)"),
                {"pids": backends},
            ).scalars()
            return any(query.startswith("LISTEN") for query in queries)
    finally:
        engine.dispose()


class Served:
    """The example saved and migrated, its worker and its uvicorn server (a module's)."""

    def __init__(self, base: str, server: subprocess.Popen[bytes], server_name: str) -> None:
        self.base = base
        self.server = server
        self.server_name = server_name


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp_path = tmp_path_factory.mktemp("fastapi")
    source = (ROOT / "examples" / "fastapi_app.py").read_text()
    assert GIVEN in source
    queue = unique("fastapi-")
    # The queue is the test's own, so that no other worker on the broker takes its run.
    (tmp_path / "fastapi_app.py").write_text(
        source.replace(GIVEN, GIVEN + f"app.conf.task_default_queue = {queue!r}\n")
    )
    prefix = unique("f")[:9] + "_"
    server_name = unique("fastapi-server-")  # the server's sessions, to tell them apart
    env = {
        **{k: "" for k in os.environ if k.startswith("CELERY_DURABLE_")},
        "CELERY_DURABLE_DATABASE_URL": PG_URL,
        "CELERY_DURABLE_TABLE_PREFIX": prefix,
        "CELERY_BROKER_URL": BROKER_URL,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),  # the app, this checkout
    }
    migrated = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "fastapi_app", "durable", "migrate"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="uvicorn-", suffix=".log", delete=False)
    worker = Worker("fastapi_app", env, queues=queue, name=unique("fastapi"), concurrency=1)
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "fastapi_app:api", "--host", "127.0.0.1"]
        + ["--port", str(port), "--log-level", "warning"],
        cwd=tmp_path,
        env={
            **os.environ,
            **env,
            "CELERY_DURABLE_DATABASE_URL": named_url(server_name),
            "PYTHONUNBUFFERED": "1",
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def server_log() -> str:
        return Path(log.name).read_text(errors="replace")

    def up() -> bool:
        if server.poll() is not None:
            raise AssertionError(f"uvicorn exited early:\n{server_log()}")
        try:
            return httpx.get(f"{base}/openapi.json", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        worker.wait_ready()
        wait_until(up, 60, 0.2, lambda: f"uvicorn to answer; log:\n{server_log()}")
        yield Served(base, server, server_name)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        log.close()
        os.unlink(log.name)
        worker.stop()
        drop_tables(PG_URL, prefix)
        delete_queues(BROKER_URL, [queue])


@pytest.mark.broker
def test_the_fastapi_example_starts_awaits_and_signals_a_run(served: Served):
    server, server_name = served.server, served.server_name

    async def calls() -> None:
        async with httpx.AsyncClient(base_url=served.base, timeout=90) as client:
            started = await client.post("/orders/42")
            assert started.status_code == 200, started.text
            run_id = started.json()["run_id"]

            async def waits_for_approval() -> bool:
                early = await client.get(f"/runs/{run_id}/result", params={"timeout": 0.2})
                assert early.status_code == 202, early.text  # not yet: a short wait says so
                return bool(early.json() == {"status": "WAITING"})

            await await_until(waits_for_approval, 60, "the run to wait for its approval")
            result = asyncio.ensure_future(
                client.get(f"/runs/{run_id}/result", params={"timeout": 60})
            )
            # That request awaits the run on the server's LISTEN connection ...
            await asyncio.to_thread(
                wait_until,
                lambda: listening(server.pid, server_name),
                30,
                message="the server to LISTEN",
            )
            assert not result.done()
            # ... while the same process serves the approval.
            approved = await client.post(f"/runs/{run_id}/approval", json={"by": "alice"})
            assert (approved.status_code, approved.json()) == (200, {"stored": True})
            answer = await result
            assert answer.status_code == 200, answer.text
            assert answer.json() == {
                "status": "SUCCEEDED",
                "result": {"status": "paid", "receipt": "receipt-42-1999-alice"},
            }
            missing = await client.get("/runs/no-such-run/result")
            assert missing.status_code == 404 and "no-such-run" in missing.json()["detail"]

    run_apart(calls())


@pytest.mark.broker
def test_the_support_agent_streams_its_events_and_waits_for_approval(served: Served):
    async def calls() -> None:
        async with httpx.AsyncClient(base_url=served.base, timeout=90) as client:
            question = {"question": "Where is order 42? Refund it."}
            started = await client.post("/support", json=question)
            assert started.status_code == 200, started.text
            run_id = started.json()["run_id"]
            events: list[dict] = []
            async with client.stream("GET", f"/runs/{run_id}/events") as sse:
                assert sse.headers["content-type"].startswith("text/event-stream")
                async for line in sse.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    events.append(json.loads(line.removeprefix("data: ")))
                    asked = events[-1].get("approval_needed")
                    if asked is not None:  # the run waits, holding no worker: approve
                        calls_ = [call["id"] for call in asked["calls"]]
                        assert [call["tool"] for call in asked["calls"]] == ["refund"]
                        decision = {"token": asked["token"], "calls": calls_, "approve": True}
                        decided = await client.post("/approvals", json=decision)
                        assert decided.status_code == 200, decided.text
            # The stream ended with the run.
            answer = await client.get(f"/runs/{run_id}/result", params={"timeout": 60})
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "SUCCEEDED"
            assert "refunded" in answer.json()["result"]
            called = [
                e["part"]["tool_name"]
                for e in events
                if e.get("event_kind") == "function_tool_call"
            ]
            assert sorted(called) == ["order_status", "refund"]
            assert any(e.get("approval_needed") for e in events)

    run_apart(calls())
