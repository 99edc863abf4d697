"""DBOS anchor for issue 26: SIGKILL of an executor mid-step to that step starting again.

Two DBOS executors (OS processes running this file with ``--executor ID``, distinct
``executor_id`` in the DBOS config, one application version) share one Postgres system
database. Executor A starts a 5-step workflow whose step 3 blocks until a file is removed;
every step start is appended to a file outside DBOS. Mid-step 3, A is SIGKILLed.

- case 1: does live executor B resume the workflow? Watched for ``--watch`` s (40); then A
  is restarted with the same executor id and the time to step 3's next start is measured.
- case 2: ``--kills`` (5) more kills, each followed at once by A's restart (same id): time
  from the restart (process spawn) and from the kill to step 3's next start, p50 and max.

Each workflow is then let finish and checked: SUCCESS, steps 1, 2, 4, 5 run once.
Not part of ``python -m benchmarks``; it imports nothing of celery_durable, so it runs in
a venv of its own (the project's environment stays free of dbos)::

    python -m venv /tmp/dbosvenv && /tmp/dbosvenv/bin/pip install dbos
    /tmp/dbosvenv/bin/python benchmarks/dbos_anchor.py --json /tmp/dbos_anchor.json

It creates the database ``--db-name`` (dbos_anchor) on ``--pg`` and drops it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PG = "postgresql://postgres@127.0.0.1:5432"


def executor_main(executor_id: str, url: str, work: Path, start: str | None) -> None:
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    starts = work / "starts.log"

    def mark(wf: str, step: int) -> None:
        line = f"{time.time():.6f} {wf} {step} {executor_id}\n".encode()
        fd = os.open(starts, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    config: DBOSConfig = {
        "name": "dbos_anchor",
        "system_database_url": url,
        "executor_id": executor_id,
        "application_version": "anchor-1",
    }
    DBOS(config=config)

    def plain(n: int) -> Callable[[str], None]:
        def step(wf: str) -> None:
            mark(wf, n)

        step.__name__ = step.__qualname__ = f"step{n}"
        return DBOS.step(name=f"step{n}")(step)

    step1, step2, step4, step5 = plain(1), plain(2), plain(4), plain(5)

    @DBOS.step(name="step3")
    def step3(wf: str) -> None:
        mark(wf, 3)
        while (work / f"block-{wf}").exists():
            time.sleep(0.02)

    @DBOS.workflow(name="five_steps")
    def five_steps(wf: str) -> None:
        for step in (step1, step2, step3, step4, step5):
            step(wf)

    DBOS.launch()
    if start is not None:
        with SetWorkflowID(start):
            DBOS.start_workflow(five_steps, start)
    (work / f"ready-{executor_id}-{os.getpid()}").touch()
    while True:
        time.sleep(1)


class Bench:
    def __init__(self, pg: str, db: str, work: Path) -> None:
        self.pg, self.db, self.work = pg, db, work
        self.url = f"{pg}/{db}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, executor_id: str, start: str | None = None) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, __file__, "--executor", executor_id, "--url", self.url]
        cmd += ["--work", str(self.work)] + (["--start", start] if start else [])
        log = open(self.work / f"{executor_id}.log", "ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def starts(self, wf: str, step: int) -> list[tuple[float, str]]:
        path = self.work / "starts.log"
        lines = path.read_text().splitlines() if path.exists() else []
        rows = [ln.split() for ln in lines]
        return [(float(r[0]), r[3]) for r in rows if r[1] == wf and r[2] == str(step)]

    def status(self, wf: str) -> tuple[str, str]:
        import psycopg

        with psycopg.connect(self.url) as conn:
            row = conn.execute(
                "SELECT status, executor_id FROM dbos.workflow_status WHERE workflow_uuid = %s",
                (wf,),
            ).fetchone()
        return (str(row[0]), str(row[1])) if row else ("MISSING", "")

    def kill(self, proc: subprocess.Popen[bytes]) -> float:
        t = time.time()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        return t

    def start_and_kill(self, wf: str) -> float:
        (self.work / f"block-{wf}").touch()
        proc = self.spawn("A", start=wf)
        wait_for(lambda: len(self.starts(wf, 3)) >= 1, 60, f"{wf}: step 3 on A")
        return self.kill(proc)

    def restart(self, wf: str, killed_at: float) -> dict[str, Any]:
        spawned = time.time()
        proc = self.spawn("A")
        wait_for(lambda: len(self.starts(wf, 3)) >= 2, 60, f"{wf}: step 3 again")
        at, by = self.starts(wf, 3)[1]
        ready = wait_for(lambda: self.ready_at(proc.pid), 30, "A ready")
        (self.work / f"block-{wf}").unlink()
        wait_for(lambda: self.status(wf)[0] == "SUCCESS", 60, f"{wf}: SUCCESS")
        counts = {n: len(self.starts(wf, n)) for n in range(1, 6)}
        self.kill(proc)
        return {
            "workflow": wf,
            "spawn_to_step3_s": round(at - spawned, 3),
            "kill_to_step3_s": round(at - killed_at, 3),
            "spawn_to_launched_s": round(ready - spawned, 3),
            "resumed_by": by,
            "step_starts": counts,
            "steps_ok": counts == {1: 1, 2: 1, 3: 2, 4: 1, 5: 1},
        }

    def ready_at(self, pid: int) -> float | None:
        path = self.work / f"ready-A-{pid}"
        return path.stat().st_mtime if path.exists() else None


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def admin(pg: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(sql)


def run(pg: str, db: str, watch: float, kills: int) -> dict[str, Any]:
    import dbos

    version = getattr(dbos, "__version__", None)
    if version is None:
        from importlib.metadata import version as pkg_version

        version = pkg_version("dbos")
    admin(pg, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    admin(pg, f'CREATE DATABASE "{db}"')
    work = Path(tempfile.mkdtemp(prefix="dbos_anchor_"))
    bench = Bench(pg, db, work)
    try:
        b = bench.spawn("B")
        wait_for(lambda: (work / f"ready-B-{b.pid}").exists(), 60, "B ready")
        # Case 1: kill A mid-step 3, watch live B for `watch` seconds, then restart A.
        killed = bench.start_and_kill("wf-0")
        deadline = time.monotonic() + watch
        while time.monotonic() < deadline and len(bench.starts("wf-0", 3)) < 2:
            time.sleep(0.05)
        resumed = len(bench.starts("wf-0", 3)) >= 2
        status, owner = bench.status("wf-0")
        case1 = {
            "watched_s": watch,
            "resumed_by_live_executor": resumed,
            "status_after_watch": status,
            "executor_id_after_watch": owner,
            "restart": bench.restart("wf-0", killed),
        }
        # Case 2: kill A mid-step 3 and restart it (same executor id) at once.
        runs = []
        for i in range(1, kills + 1):
            runs.append(bench.restart(f"wf-{i}", bench.start_and_kill(f"wf-{i}")))
        assert b.poll() is None, "executor B died"
    finally:
        for proc in bench.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        admin(pg, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    def summary(key: str) -> dict[str, float]:
        values = [r[key] for r in runs]
        return {"p50": round(statistics.median(values), 3), "max": max(values)}

    return {
        "dbos_version": version,
        "python": sys.version.split()[0],
        "work_dir": str(work),
        "case1_other_executor": case1,
        "case2_restart": {
            "kills": kills,
            "spawn_to_step3_s": summary("spawn_to_step3_s"),
            "kill_to_step3_s": summary("kill_to_step3_s"),
            "spawn_to_launched_s": summary("spawn_to_launched_s"),
            "resumed_by": sorted({r["resumed_by"] for r in runs}),
            "steps_ok": all(r["steps_ok"] for r in runs),
            "runs": runs,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=PG, help="server URL, no database")
    parser.add_argument("--db-name", default="dbos_anchor")
    parser.add_argument("--watch", type=float, default=40.0)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--executor", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--start", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.executor:
        executor_main(args.executor, args.url, args.work, args.start)
        return
    res = run(args.pg, args.db_name, args.watch, args.kills)
    c1, c2 = res["case1_other_executor"], res["case2_restart"]
    r1 = c1["restart"]
    print(f"dbos {res['dbos_version']}, python {res['python']}")
    print(
        f"case 1, SIGKILL of A mid-step 3, live executor B: "
        f"{'RESUMED' if c1['resumed_by_live_executor'] else 'not resumed'} within "
        f"{c1['watched_s']:.0f} s (status {c1['status_after_watch']}, executor_id "
        f"{c1['executor_id_after_watch']}); A restarted after that: step 3 again "
        f"{r1['spawn_to_step3_s']:.2f} s after the spawn, {r1['kill_to_step3_s']:.2f} s "
        f"after the kill, on {r1['resumed_by']}"
    )
    s, k, la = c2["spawn_to_step3_s"], c2["kill_to_step3_s"], c2["spawn_to_launched_s"]
    print(
        f"case 2, SIGKILL of A mid-step 3 then A restarted at once (same executor id), "
        f"{c2['kills']} kills: spawn -> step 3 p50 {s['p50']:.2f} s, max {s['max']:.2f} s; "
        f"kill -> step 3 p50 {k['p50']:.2f} s, max {k['max']:.2f} s (spawn -> DBOS "
        f"launched p50 {la['p50']:.2f} s); resumed on {', '.join(c2['resumed_by'])}; "
        f"steps 1, 2, 4, 5 once each: {c2['steps_ok'] and r1['steps_ok']}"
    )
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
