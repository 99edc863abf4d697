"""How each figure of the suite is measured: the texts that go in a run's JSON document
(``methods``) beside the figures.

Example::

    doc["methods"] = {**METHODS, **longlived.METHODS}
"""

from __future__ import annotations

METHODS = {
    "throughput": (
        "The suite's one throughput method (benchmarks.throughput.compare), the same in the "
        "headline, the filled tables and every scale row: on one fresh worker, a warm-up "
        "batch of each kind, then rounds of one batch of N per kind (plain tasks, plain "
        "chains, the 3-step workflows), the order reversed every other round. A batch: N "
        "started back to back with .delay(); clock from just before the first .delay() to "
        "the last completion (the latest date_done of the plain results, stored by the "
        "worker; the latest finished_at of the durable runs, database clock, same host). "
        "The driver waits with AsyncResult joins (plain) or by polling the runs table for "
        "the batch's unfinished ids (durable). Each durable batch starts with a CHECKPOINT. "
        "A figure is the median of its rounds; its ratio to the plain task is the median of "
        "the per-round ratios (each against the plain batch of the same round), with their "
        "range as the spread. Durable runs report their final state to the Redis result "
        "backend when they settle (the worker's write after the settle's commit); the same "
        "3-step workflow started with apply_async(ignore_result=True) reports nothing (no "
        "canvas: as on an app without a backend), measured beside it in the same rounds; "
        "with / without is the median of the per-round ratios of the two."
    ),
    "cpu": (
        "CPU seconds from /proc between start and the driver seeing the last result, per "
        "item: driver (this process), worker (benchmark worker process groups), postgres "
        "(all its processes), redis, other (everything else: interference, kernel threads)."
    ),
    "latency": (
        "One at a time after a warm-up: start, then AsyncResult.get() (plain, Redis pub/sub) "
        "or handle.get() (durable, LISTEN/NOTIFY); driver perf_counter."
    ),
    "replay": (
        "Workflow of K no-op steps that raises on attempt 1 (max_attempts=2, retry_backoff=0); "
        "the sweeper republishes it and attempt 2 replays K steps from history. Time from "
        "attempt 2's task_prerun (worker time.time(), just before the claim UPDATE) to the "
        "start of step K+1 (worker time.time() written to Redis). Median of the repetitions."
    ),
    "commits": (
        "Committed transactions that wrote: the transaction ids assigned in a window (xmax of "
        "pg_current_snapshot() at its start and end) whose pg_xact_status is committed, exact "
        "once they finished (pg_stat_database.xact_commit gets a backend's count only when it "
        "flushes its statistics, up to 10 s later on PG15). Every transaction of a workflow's "
        "path writes; read-only ones (the driver's monitoring statements, idle polls) get no "
        "id and are not counted. A window ends 1 s after the workload, once none of its ids "
        "is in progress. Subtracted: the idle rate (sweeper, heartbeat) measured with the "
        "workers idle before and after, times the window length. Includes the driver's "
        "INSERT of each run. Ids are cluster-wide: a window in which another database had a "
        "session start, end or run a statement is not clean (a workflow window is measured "
        "again, up to the attempts; the figure is flagged). per step = (c10 - c3) / 7; "
        "fixed = c3 - 3 x per step."
    ),
    "fill": (
        "INSERT ... SELECT generate_series of finished runs (one in 50 FAILED, the rest "
        "SUCCEEDED; one in 4 of a second workflow; due_at NULL, ids in the library's "
        "time-ordered UUIDv7 layout, created 10 ms apart in the past) with their steps into "
        "the run's own namespace and tables, then VACUUM ANALYZE, then the durable "
        "throughput measurement again on the same worker."
    ),
    "fanout": (
        "A durable workflow doing cd.map(noop_step, range(100)) against a Celery chord of 100 "
        "no-op tasks with a no-op callback (Redis result backend), on one fresh worker of the "
        "same command line. Throughput: a small batch started back to back after a warm-up; "
        "clock from the first start to the last completion (the callbacks' date_done, the "
        "runs' finished_at). Latency: one at a time, .get(). Commits: as for workflows, with "
        "maps of 100 and of 10 items; per item = (c100 - c10) / 90, fixed = c10 - 10 x per item."
    ),
    "kill": (
        "A chord (callback sets a Redis key) and a map of 20 items that block on a Redis flag; "
        "once two items run, SIGKILL of the worker's process group, the flag set, a fresh "
        "worker started, and a bounded wait for the callback or the run. The kill phase's "
        "workers use lock_timeout 5 s, poll_interval 0.5 s, dispatch_grace 5 s."
    ),
    "kill_chord": (
        "chord([block_flow.s(i, flag) for i in range(10)], chord_done.s(flag)), a chord of 10 "
        "durable workflows whose one step blocks on a Redis flag, and the same chord of 10 "
        "plain blocker tasks, each with the plain callback chord_done (it counts its runs "
        "and keeps the results it got, in Redis); once two members run, SIGKILL of the "
        "worker's process group, the flag set, a fresh worker, a bounded wait for the "
        "callback, then 2 s more on that worker. Reported: completed, the callback's runs, "
        "whether each had all 10 results, the time from the kill, the members that "
        "succeeded (result backend). The same workers' settings as the kill phase."
    ),
    "signal": (
        "Start the signal workflow, poll until WAITING, then from just before handle.signal() "
        "(driver time.time()) to the start of the next step (worker time.time() via Redis)."
    ),
    "operations": (
        "With the fill in the tables (one run in 50 FAILED, one in 4 of a second workflow): "
        "durable.list_runs(status='failed', workflow=<three_steps>, limit=50) (what `durable "
        "list --status failed --workflow X --limit 50` runs), its second page (by cursor), "
        "list_runs(limit=50) unfiltered, and durable.stats(), each after 2 warm-up calls, "
        "timed over the scale's repetitions (driver perf_counter, through SQLAlchemy and "
        "psycopg: the command adds only its Python start-up). Their plans are read with "
        "EXPLAIN and the indexes named in them recorded. The dashboard: GET / (the runs "
        "page: list_runs + stats) and GET /run/<id> of a run of 1,000 steps (inserted for "
        "the measurement, ~150-byte inputs and outputs) through its WSGI app in-process "
        "(Flask's test client), 2 warm-ups, then the same repetitions."
    ),
}
