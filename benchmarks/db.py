"""Postgres access of the driver: monitoring, commit counters, the big fill, clean-up.

Every statement runs on one autocommit psycopg connection tagged with the run's
``application_name`` and is counted, so the commit measurements can subtract the driver's
own transactions exactly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")
# One run in FAILED_EVERY of the fill failed, with this error.
FAILED_EVERY = 50
FILL_ERROR = (
    '{"type":"builtins.RuntimeError","message":"card declined","traceback":"","args":null,"step":2}'
)


def libpq_url(sqlalchemy_url: str) -> str:
    """A SQLAlchemy ``postgresql+psycopg://`` URL as a libpq URI."""
    url = make_url(sqlalchemy_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class Monitor:
    """The driver's own database connection; ``queries`` counts its transactions."""

    def __init__(self, url: str, prefix: str, namespace: str) -> None:
        self.conn = psycopg.connect(libpq_url(url), autocommit=True)
        self.prefix = prefix
        self.namespace = namespace
        self.runs = sql.Identifier(f"{prefix}runs")
        self.steps = sql.Identifier(f"{prefix}steps")
        self.queries = 0
        # The benchmark's database: other databases' backends are interference (cpu.py).
        self.database: str = self.conn.info.dbname

    def close(self) -> None:
        self.conn.close()

    def execute(self, query: Any, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
        self.queries += 1
        return self.conn.execute(query, params)

    # -- cumulative statistics -----------------------------------------------------------

    def sessions(self) -> int:
        """Sessions ever opened on this database (a new backend reports its own at its first
        idle moment)."""
        row = self.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        return int(row[0])

    def xids(self) -> tuple[int, int]:
        """(xmin, xmax) of a snapshot taken now: the oldest transaction id still running and
        the next one to be assigned (cluster-wide). The statement itself only reads, so it
        gets no transaction id."""
        row = self.execute(
            "SELECT pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text "
            "FROM pg_current_snapshot() AS s"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def id_statuses(self, first: int, end: int) -> dict[str, int]:
        """How many of the transaction ids ``first`` .. ``end - 1`` (``end`` at most a
        snapshot's xmax) committed, aborted or are in progress."""
        rows = self.execute(
            "SELECT pg_xact_status(g::text::xid8), count(*) "
            "FROM generate_series(%s::bigint, %s::bigint - 1) AS g GROUP BY 1",
            (first, end),
        ).fetchall()
        return {str(status): int(n) for status, n in rows}

    def other_databases(self) -> tuple[int, int]:
        """(sessions, xact_commit) summed over the other databases of the cluster. A new
        session reports itself at once and an ending one flushes its counts as it exits: a
        change means another database had a new or ended session in between."""
        row = self.execute(
            "SELECT coalesce(sum(sessions), 0)::bigint, coalesce(sum(xact_commit), 0)::bigint "
            "FROM pg_stat_database WHERE datname IS DISTINCT FROM current_database()"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def other_databases_busy(self, since: float) -> int:
        """Backends of other databases (clients, autovacuum workers) running, holding a
        transaction id or having run a statement since ``since``."""
        row = self.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname IS NOT NULL AND datname <> current_database() "
            "AND (state = 'active' OR backend_xid IS NOT NULL "
            "OR backend_start >= to_timestamp(%s) OR state_change >= to_timestamp(%s))",
            (since, since),
        ).fetchone()
        return int(row[0]) if row else 0

    def foreign_sessions(self, since: float, tag: str) -> int:
        """Client sessions of other programs that started or ran a statement since ``since``."""
        row = self.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND application_name IS DISTINCT FROM %s "
            "AND (backend_start >= to_timestamp(%s) OR state_change >= to_timestamp(%s))",
            (tag, since, since),
        ).fetchone()
        return int(row[0]) if row else 0

    def own_new_sessions(self, since: float, tag: str) -> int:
        row = self.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s AND backend_start >= to_timestamp(%s)",
            (tag, since),
        ).fetchone()
        return int(row[0]) if row else 0

    def wal_position(self) -> int:
        """The WAL insert position in bytes (a WAL volume counter that needs no flush)."""
        row = self.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        return int(row[0])

    # -- runs ------------------------------------------------------------------------------

    def unfinished(self, ids: Sequence[str]) -> list[str]:
        """The ids among ``ids`` whose run has not finished (index lookups only)."""
        if not ids:
            return []
        rows = self.execute(
            sql.SQL(
                "SELECT id FROM {} WHERE namespace = %s AND id = ANY(%s) "
                "AND status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"
            ).format(self.runs),
            (self.namespace, list(ids)),
        ).fetchall()
        return [r[0] for r in rows]

    def count_status(self, ids: Sequence[str], status: str) -> int:
        row = self.execute(
            sql.SQL(
                "SELECT count(*) FROM {} WHERE namespace = %s AND id = ANY(%s) AND status = %s"
            ).format(self.runs),
            (self.namespace, list(ids), status),
        ).fetchone()
        return int(row[0]) if row else 0

    def count_reporting(self, ids: Sequence[str]) -> int:
        """How many of ``ids`` store a canvas that reports to the result backend (the
        ``report`` of ``runs.canvas``; ``ignore_result=True`` stores none)."""
        row = self.execute(
            sql.SQL(
                "SELECT count(*) FROM {} WHERE namespace = %s AND id = ANY(%s) "
                "AND (canvas::jsonb ->> 'report')::boolean"
            ).format(self.runs),
            (self.namespace, list(ids)),
        ).fetchone()
        return int(row[0]) if row else 0

    def last_finished_at(self, ids: Sequence[str]) -> float:
        """The database-clock time the last of ``ids`` finished (epoch seconds)."""
        row = self.execute(
            sql.SQL("SELECT max(finished_at) FROM {} WHERE namespace = %s AND id = ANY(%s)").format(
                self.runs
            ),
            (self.namespace, list(ids)),
        ).fetchone()
        assert row is not None and row[0] is not None
        return float(row[0])

    def map_marks(self, run_id: str) -> tuple[float, float, float, float]:
        """A fan-out run's marks on this host's clock (epoch seconds): its items' insert
        (the statement's start), their first and last record, and the run's finish."""
        row = self.execute(
            sql.SQL(
                "SELECT min(i.created_at), min(i.finished_at), max(i.finished_at), "
                "max(r.finished_at) FROM {} i JOIN {} r ON r.namespace = i.namespace "
                "AND r.id = i.run_id WHERE i.namespace = %s AND i.run_id = %s"
            ).format(sql.Identifier(f"{self.prefix}items"), self.runs),
            (self.namespace, run_id),
        ).fetchone()
        assert row is not None and None not in row, f"run {run_id} has no finished items"
        return (float(row[0]), float(row[1]), float(row[2]), float(row[3]))

    def row_counts(self) -> dict[str, int]:
        out = {}
        for name, table in (("runs", self.runs), ("steps", self.steps)):
            row = self.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
            out[name] = int(row[0]) if row else 0
        return out

    # -- the 1M fill -----------------------------------------------------------------------

    def fill_finished(
        self,
        runs: int,
        steps_per_run: int,
        workflow: str,
        step: str,
        queue: str,
        other_workflow: str,
        failed_every: int = FAILED_EVERY,
    ) -> dict[str, float]:
        """Insert ``runs`` finished runs of ``steps_per_run`` steps each (INSERT ... SELECT
        generate_series), then VACUUM ANALYZE both tables. Returns the seconds each took.

        Run ``g`` was created at ``first + g * 10 ms`` (all in the past) and its id has the
        layout of the ids the library generates (UUIDv7: time in ms, then random bits).
        Every ``failed_every``-th run FAILED (the rest SUCCEEDED), and every 4th is of
        ``other_workflow``: the operations commands have failures to find among successes
        of two workflows.
        """
        timings: dict[str, float] = {}
        first = time.time() - 60.0 - runs * 0.01
        created = "(%(first)s + g * 0.01)"
        run_id = (
            f"(lpad(to_hex(floor({created} * 1000)::bigint), 12, '0') || '7' || "
            "substr(md5('fill' || g), 1, 3) || '8' || substr(md5('fill' || g), 4, 15))"
            "::uuid::text"
        )
        started = time.perf_counter()
        self.execute(
            sql.SQL(
                "INSERT INTO {} (namespace, id, name, status, queue, args, attempts, "
                "max_attempts, retry_backoff, owner, fence, due_at, ready_at, dispatches, "
                "wait_signal, result, error, cancel_requested, cancel_reason, created_at, "
                "started_at, finished_at, updated_at) "
                f"SELECT %(ns)s, {run_id}, "
                "CASE WHEN mod(g, 4) = 0 THEN %(other)s ELSE %(name)s END, "
                "CASE WHEN mod(g, %(every)s) = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END, %(queue)s, "
                "'[[],{{}}]', 1, 3, 5.0, NULL, 1, NULL, NULL, 1, NULL, "
                "CASE WHEN mod(g, %(every)s) = 0 THEN NULL ELSE %(result)s END, "
                "CASE WHEN mod(g, %(every)s) = 0 THEN %(error)s END, false, "
                f"NULL, {created}, {created} + 0.002, {created} + 0.008, {created} + 0.008 "
                "FROM generate_series(1, %(n)s) AS g"
            ).format(self.runs),
            {
                "ns": self.namespace,
                "name": workflow,
                "other": other_workflow,
                "every": failed_every,
                "queue": queue,
                "result": str(sum(range(steps_per_run))),
                "error": FILL_ERROR,
                "first": first,
                "n": runs,
            },
        )
        timings["insert_runs_s"] = time.perf_counter() - started
        started = time.perf_counter()
        self.execute(
            sql.SQL(
                "INSERT INTO {} (namespace, run_id, idx, name, status, input, output, error, "
                "created_at) "
                f"SELECT %(ns)s, {run_id}, s, %(step)s, 'ok', "
                "'[[' || s || '],{{}}]', s::text, NULL, "
                f"{created} + 0.003 + s * 0.001 "
                "FROM generate_series(1, %(n)s) AS g, generate_series(0, %(k)s - 1) AS s"
            ).format(self.steps),
            {"ns": self.namespace, "step": step, "first": first, "n": runs, "k": steps_per_run},
        )
        timings["insert_steps_s"] = time.perf_counter() - started
        started = time.perf_counter()
        self.execute(sql.SQL("VACUUM ANALYZE {}").format(self.runs))
        self.execute(sql.SQL("VACUUM ANALYZE {}").format(self.steps))
        timings["vacuum_analyze_s"] = time.perf_counter() - started
        return timings

    def table_sizes(self) -> dict[str, str]:
        out = {}
        for name in ("runs", "steps"):
            row = self.execute(
                "SELECT pg_size_pretty(pg_total_relation_size(%s))", (f"{self.prefix}{name}",)
            ).fetchone()
            out[name] = str(row[0]) if row else "?"
        return out

    def drop_tables(self) -> list[str]:
        """Drop every table whose name starts with the run's prefix."""
        rows = self.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND left(tablename, %s) = %s",
            (len(self.prefix), self.prefix),
        ).fetchall()
        names = [r[0] for r in rows]
        for name in names:
            self.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        return names

    def server_info(self) -> dict[str, str]:
        info = {}
        for setting in (
            "server_version",
            "shared_buffers",
            "synchronous_commit",
            "fsync",
            "wal_sync_method",
            "autovacuum",
            "max_connections",
        ):
            row = self.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting))).fetchone()
            info[setting] = str(row[0]) if row else "?"
        return info
