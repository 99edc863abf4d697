"""Long-lived workflows at scale: the sweeper with 100,000 WAITING runs, and a
continue_as_new loop of 10,000 generations.

``waiters``: WAITING runs of a registered workflow are inserted with INSERT ... SELECT
generate_series, their timers spread evenly over the next 24 h (one in two also waits for
a signal), then ``durable.runtime.sweeper.sweep_once()`` (every query of one sweeper poll)
is timed; none is due, so it must publish nothing. Its plan is read with EXPLAIN.

``continue_loop``: one run goes through the store's calls of a worker, generation after
generation: claim, read the history (replay), record two steps, ``continue_as_new``. The
claim and the history read are timed; the first and last tenth are compared.

Example::

    sweep = waiters(bench.durable, rds, queue, 100_000, reps=30)
    loop = continue_loop(bench.durable, 10_000)
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from sqlalchemy import text

from benchmarks.measure import summary_ms
from celery_durable import Durable
from celery_durable.store import NewRun, StepRecord

DAY = 86_400.0


def waiters(durable: Durable, rds: Any, queue: str, count: int, reps: int) -> dict[str, Any]:
    """Insert ``count`` WAITING runs (timers over the next day), time sweeps over them."""
    store = durable.runtime.store
    runs = store.tables.runs.name
    name = sorted(durable.workflows)[0]
    started = time.perf_counter()
    with store.engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO {runs} (namespace, id, name, status, queue, args, attempts, "
                "max_attempts, retry_backoff, fence, due_at, dispatches, wait_signal, "
                "cancel_requested, created_at, updated_at) "
                "SELECT :ns, 'waiter-' || g, :name, 'WAITING', :queue, '[[],{}]', 0, 3, 5.0, "
                "1, :now + 60 + g * :spread, 0, "
                "CASE WHEN mod(g, 2) = 0 THEN 'approval' END, false, :now, :now "
                "FROM generate_series(1, :n) AS g"
            ),
            {
                "ns": store.namespace,
                "name": name,
                "queue": queue,
                "now": time.time(),
                "spread": (DAY - 60) / count,
                "n": count,
            },
        )
        conn.execute(text(f"ANALYZE {runs}"))
    inserted_s = time.perf_counter() - started
    depth = rds.llen(queue)
    published = sum(durable.runtime.sweeper.sweep_once() for _ in range(3))  # warm-up
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        published += durable.runtime.sweeper.sweep_once()
        samples.append(time.perf_counter() - t0)
    # The predicate of the sweeper's due-runs statement (sweep_due_runs), explained.
    with store.engine.connect() as conn:
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                text(
                    f"EXPLAIN SELECT id FROM {runs} WHERE namespace = :ns AND name IN (:name) "
                    "AND due_at IS NOT NULL AND due_at <= extract(epoch FROM now()) "
                    "ORDER BY due_at LIMIT 500 FOR UPDATE SKIP LOCKED"
                ),
                {"ns": store.namespace, "name": name},
            )
        )
    with store.engine.begin() as conn:
        conn.execute(text(f"DELETE FROM {runs} WHERE id LIKE 'waiter-%'"))
    return {
        "waiters": count,
        "insert_s": inserted_s,
        "sweep": summary_ms(samples),
        "published": published,
        "queue_growth": rds.llen(queue) - depth,
        "plan": plan,
        "index_scan": f"ix_{store.table_prefix}runs_due" in plan,
    }


def continue_loop(durable: Durable, generations: int) -> dict[str, Any]:
    """One run through ``generations`` generations; claim and history read per generation."""
    store, config = durable.runtime.store, durable.config
    run_id = f"loop-{time.time_ns()}"
    store.insert_run(NewRun(run_id, "benchmarks.loop", "[[0],{}]", None, 3, 1.0, 60.0))
    claims, replays = [], []
    started = time.perf_counter()
    for n in range(generations):
        t0 = time.perf_counter()
        claim = store.claim_run(run_id, "bench-owner", config.lock_timeout)
        t1 = time.perf_counter()
        history = store.load_steps(run_id)
        t2 = time.perf_counter()
        if claim is None or history:
            raise RuntimeError(f"generation {n}: claim {claim}, history {len(history)} steps")
        claims.append(t1 - t0)
        replays.append(t2 - t1)
        for idx in range(2):
            step = StepRecord(idx, "benchmarks.noop_step", "ok", f"[[{n}],{{}}]", str(n), None)
            store.record_step(run_id, claim.fence, step)
        due = store.sagas.continue_as_new(run_id, claim.fence, f"[[{n + 1}],{{}}]", 60.0)
        if due is None or isinstance(due, str):
            raise RuntimeError(f"generation {n}: continue_as_new returned {due!r}")
    elapsed = time.perf_counter() - started
    tenth = max(1, generations // 10)
    both = [c + r for c, r in zip(claims, replays, strict=True)]
    first, last = statistics.fmean(both[:tenth]), statistics.fmean(both[-tenth:])
    run = store.get_run(run_id)
    with store.engine.begin() as conn:  # the archived generations and their steps
        for table in (store.tables.steps.name, store.tables.runs.name):
            column = "run_id" if table == store.tables.steps.name else "id"
            conn.execute(text(f"DELETE FROM {table} WHERE {column} LIKE :p"), {"p": f"{run_id}%"})
    return {
        "generations": generations,
        "seconds": elapsed,
        "generation": run.generation if run else None,
        "claim": summary_ms(claims),
        "replay": summary_ms(replays),
        "first_tenth_ms": first * 1000,
        "last_tenth_ms": last * 1000,
        "last_vs_first": last / first,
        "claim_by_tenth_ms": [
            statistics.fmean(claims[i : i + tenth]) * 1000 for i in range(0, generations, tenth)
        ],
        "replay_by_tenth_ms": [
            statistics.fmean(replays[i : i + tenth]) * 1000 for i in range(0, generations, tenth)
        ],
    }


def describe_waiters(x: dict[str, Any]) -> str:
    s = x["sweep"]
    return (
        f"sweep with {x['waiters']:,} waiting runs: p50 {s['p50_ms']:.1f} ms, p99 "
        f"{s['p99_ms']:.1f} ms; {x['published']} published, queue +{x['queue_growth']}; "
        f"{'index scan' if x['index_scan'] else 'NO index scan'}"
    )


def describe_loop(x: dict[str, Any]) -> str:
    return (
        f"{x['generations']:,} generations in {x['seconds']:.1f}s: claim + replay "
        f"{x['first_tenth_ms']:.2f} ms (first tenth) -> {x['last_tenth_ms']:.2f} ms (last "
        f"tenth), x{x['last_vs_first']:.2f}"
    )


METHODS = {
    "waiters": (
        "WAITING runs of a registered workflow inserted with INSERT ... SELECT "
        "generate_series, timers spread evenly over the next 24 h (one in two also waits for a "
        "signal), ANALYZE; then durable.runtime.sweeper.sweep_once() (every query of one "
        "sweeper poll: due "
        "runs, signalled runs, items, children, retention) timed after 3 warm-ups; nothing is "
        "due, so nothing may be published (the broker queue's length is compared). The plan of "
        "the due-runs predicate is read with EXPLAIN."
    ),
    "continue_as_new": (
        "One run through the store calls a worker makes per generation: claim_run, load_steps "
        "(the replay's read), two record_step, continue_as_new (one transaction). claim and "
        "load_steps timed with perf_counter; the mean of the last tenth of the generations "
        "is compared with the first tenth's."
    ),
}


def longlived_figures(r: dict[str, Any]) -> list[Any]:
    """The sweep with the waiters in the tables, and claim + replay across generations."""
    from benchmarks.render import Figure

    if "waiters" not in r:
        return []
    w, loop = r["waiters"], r["continue_loop"]
    return [
        Figure(
            "sweep_ms_waiting_runs",
            f"one sweep, {w['waiters']:,} WAITING runs (timers over a day), p50",
            w["sweep"]["p50_ms"],
            "ms",
            note=(
                f"p99 {w['sweep']['p99_ms']:.1f}; {w['published']} published, broker queue "
                f"+{w['queue_growth']}; due-runs predicate "
                f"{'an index scan of ix_runs_due' if w['index_scan'] else 'NOT an index scan'}"
            ),
        ),
        Figure(
            "continue_as_new_claim_replay_ms",
            f"claim + replay read, last tenth of {loop['generations']:,} continue_as_new",
            loop["last_tenth_ms"],
            "ms",
            note=(
                f"first tenth {loop['first_tenth_ms']:.2f} ms (x{loop['last_vs_first']:.2f}); "
                f"{loop['seconds']:.1f} s in all"
            ),
        ),
    ]


def longlived_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    w, loop = r["waiters"], r["continue_loop"]
    sweep_p99 = w["sweep"]["p99_ms"]
    return [
        {
            "target": f"one sweep with {w['waiters']:,} WAITING runs, p99 (ms), nothing published",
            "value": sweep_p99,
            "op": "<",
            "threshold": 50.0,
            "pass": sweep_p99 < 50.0 and w["published"] == 0 and w["queue_growth"] <= 0,
            "note": "",
        },
        {
            "target": (
                f"claim + replay read, last / first tenth of {loop['generations']:,} "
                "continue_as_new generations"
            ),
            "value": loop["last_vs_first"],
            "op": "<=",
            "threshold": 1.5,
            "pass": loop["last_vs_first"] <= 1.5,
            "note": "",
        },
    ]
