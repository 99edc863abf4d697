"""Every SQL statement of celery_durable, each named for what it does.

The hot path of a workflow of N steps costs N + 3 commits, one round trip each on Postgres:
``insert_run`` (start), ``claim_run`` (plus ``load_steps`` only when history exists),
``record_step`` per step, ``settle_run``. The Postgres engine runs in autocommit mode so a
single statement is its own transaction (no BEGIN round trip); statements that must see or
lock several rows at once are written as one statement with CTEs.

Example::

    store = Store("postgresql+psycopg://postgres@127.0.0.1/test", "durable_", "default")
    store.insert_run(NewRun(id="r1", name="shop.checkout", args="[[42],{}]", ...))
"""

from __future__ import annotations

import dataclasses
import os
import select as select_module
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Float,
    and_,
    bindparam,
    case,
    cast,
    create_engine,
    event,
    exists,
    false,
    func,
    literal,
    literal_column,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from ..errors import ConfigurationError

try:  # the Postgres driver is optional: SQLite needs none
    import psycopg
except ImportError:  # pragma: no cover - exercised only without the postgres extra
    psycopg = None  # type: ignore[assignment]
from .schema import ACTIVE_STATUSES, FINISHED_STATUSES, Tables, build_tables

APP_NAME = "celery_durable"

# Outcomes of the fenced writes.
RECORDED = "recorded"
LEASE_LOST = "lease_lost"
CANCELLED = "cancelled"
SUSPENDED = "suspended"
SIGNALLED = "signalled"
# Outcomes of insert_signal (besides a finished run's status).
STORED = "stored"
DUPLICATE = "duplicate"
NOT_FOUND = "not_found"
FULL = "full"


@dataclasses.dataclass(frozen=True)
class NewRun:
    id: str
    name: str
    args: str
    queue: str | None
    max_attempts: int
    retry_backoff: float
    dispatch_grace: float
    # Seconds before the run may start (countdown/eta): the sweeper publishes it then.
    start_delay: float | None = None


@dataclasses.dataclass(frozen=True)
class Claim:
    fence: int
    attempts: int
    max_attempts: int
    retry_backoff: float
    args: str
    has_steps: bool


@dataclasses.dataclass(frozen=True)
class StepRecord:
    idx: int
    name: str
    status: str  # "ok", "error" or "waiting"
    input: str
    output: str | None
    error: str | None


@dataclasses.dataclass(frozen=True)
class RunRecord:
    id: str
    name: str
    status: str
    queue: str | None
    args: str
    attempts: int
    max_attempts: int
    fence: int
    owner: str | None
    result: str | None
    error: str | None
    cancel_requested: bool
    cancel_reason: str | None
    wait_signal: str | None
    due_at: float | None
    created_at: float
    started_at: float | None
    finished_at: float | None


@dataclasses.dataclass(frozen=True)
class DueRun:
    id: str
    name: str
    status: str
    args: str
    queue: str | None


def _p(params: dict[str, Any]) -> dict[str, Any]:
    """Bind names carry a prefix: SQLAlchemy reserves column names in VALUES/SET."""
    return {f"p_{key}": value for key, value in params.items()}


def _held_slot(relaxed: bool) -> str:
    return "held_relaxed" if relaxed else "held"


def _has_pending_input(driver: Any) -> bool:
    try:
        readable, _, _ = select_module.select([driver.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _now_sql(dialect: str) -> Any:
    if dialect == "postgresql":
        return literal_column("CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)")
    return literal_column("((julianday('now') - 2440587.5) * 86400.0)")


_STORES: weakref.WeakSet[Store] = weakref.WeakSet()


def _reset_stores_after_fork() -> None:
    for store in list(_STORES):
        store._after_fork_in_child()


os.register_at_fork(after_in_child=_reset_stores_after_fork)


class Store:
    """The database side of one namespace; engines are created per process, lazily."""

    def __init__(self, url: str, table_prefix: str, namespace: str) -> None:
        try:
            self.url = make_url(url)
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises several types here
            raise ConfigurationError(
                f"durable_database_url={url!r} is not a valid URL: {exc}"
            ) from None
        self.dialect = self.url.get_backend_name()
        if self.dialect not in ("postgresql", "sqlite"):
            raise ConfigurationError(
                f"durable_database_url={url!r}: only postgresql (psycopg 3) and sqlite "
                "are supported"
            )
        self.table_prefix = table_prefix
        self.namespace = namespace
        self.tables: Tables = build_tables(table_prefix)
        self.notify_channel = f"{table_prefix}events"
        self._engine: Engine | None = None
        self._compiled: dict[int, tuple[str, dict[str, Any]]] = {}
        self._local = threading.local()
        self._pid = -1
        self._lock = threading.Lock()
        _STORES.add(self)
        self._build_statements()

    def _after_fork_in_child(self) -> None:
        # Another thread may have held the lock at fork time: the child gets a fresh one,
        # and must not touch the parent's pooled sockets.
        self._lock = threading.Lock()
        self._local = threading.local()  # psycopg never closes a parent's socket on GC
        if self._engine is not None:
            self._engine.dispose(close=False)
        self._engine = None

    # -- connections -------------------------------------------------------------------

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @property
    def engine(self) -> Engine:
        """This process's engine: prefork children must not share the parent's sockets."""
        engine = self._engine
        if engine is not None and self._pid == os.getpid():
            return engine
        with self._lock:
            if self._engine is not None and self._pid != os.getpid():
                self._engine.dispose(close=False)
                self._engine = None
            if self._engine is None:
                self._engine = self._create_engine()
                self._pid = os.getpid()
            return self._engine

    def _create_engine(self) -> Engine:
        if self.is_postgres:
            return create_engine(
                self.url,
                isolation_level="AUTOCOMMIT",
                pool_size=5,
                max_overflow=10,
                pool_reset_on_return=None,
                # Off the hot path: a connection killed by a server restart is replaced.
                pool_pre_ping=True,
                connect_args=self._connect_args(),
            )
        engine = create_engine(self.url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Let SQLAlchemy, not pysqlite, decide where transactions begin.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # IMMEDIATE takes the write lock up front: no deadlock between two readers
            # that both want to write.
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One atomic statement (autocommit on Postgres, a transaction on SQLite)."""
        if self.is_postgres:
            with self.engine.connect() as conn:
                yield conn
        else:
            with self.engine.begin() as conn:
                yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """Reads; on SQLite the transaction a read opens (BEGIN IMMEDIATE) ends at once."""
        with self.engine.connect() as conn:
            yield conn
            if not self.is_postgres:
                conn.rollback()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Several statements in one transaction."""
        if self.is_postgres:
            with self.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="READ COMMITTED")
                with conn.begin():
                    yield conn
        else:
            with self.engine.begin() as conn:
                yield conn

    def dispose(self) -> None:
        for slot in (_held_slot(False), _held_slot(True)):
            held = getattr(self._local, slot, None)
            if held is not None and held[0] == os.getpid():
                held[1].close()
            setattr(self._local, slot, None)
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    # -- statements, built once so SQLAlchemy's compiled cache serves every call --------

    def _insert(self, table: Any) -> Any:
        return (postgresql.insert if self.is_postgres else sqlite.insert)(table)

    def _build_statements(self) -> None:
        runs, steps = self.tables.runs, self.tables.steps
        # The columns of a StepRecord and of a DueRun, in their field order.
        step_row = (
            steps.c.idx,
            steps.c.name,
            steps.c.status,
            steps.c.input,
            steps.c.output,
            steps.c.error,
        )
        due_row = (runs.c.id, runs.c.name, runs.c.status, runs.c.args, runs.c.queue)
        now = _now_sql(self.dialect)
        self._now = now
        ns = runs.c.namespace == self.namespace
        run_is = and_(ns, runs.c.id == bindparam("p_run_id"))
        fenced = and_(run_is, runs.c.fence == bindparam("p_fence"), runs.c.status == "RUNNING")

        start_delay = bindparam("p_start_delay", type_=Float)
        self._insert_run = (
            self._insert(runs)
            .values(
                namespace=self.namespace,
                id=bindparam("p_id"),
                name=bindparam("p_name"),
                status="PENDING",
                queue=bindparam("p_queue"),
                args=bindparam("p_args"),
                attempts=0,
                max_attempts=bindparam("p_max_attempts"),
                retry_backoff=bindparam("p_retry_backoff"),
                fence=0,
                ready_at=case((start_delay.is_(None), None), else_=now + start_delay),
                due_at=now + func.coalesce(start_delay, bindparam("p_grace")),
                dispatches=0,
                cancel_requested=False,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing()
            .returning(runs.c.id)
        )

        has_steps: Any = exists().where(
            steps.c.namespace == self.namespace, steps.c.run_id == runs.c.id
        )
        claimable = and_(
            runs.c.cancel_requested == false(),
            or_(
                and_(
                    runs.c.status == "PENDING",
                    or_(runs.c.ready_at.is_(None), runs.c.ready_at <= now),
                ),
                and_(
                    runs.c.status == "RUNNING",
                    runs.c.due_at < now,
                    runs.c.attempts < runs.c.max_attempts,
                ),
            ),
        )
        claim = (
            update(runs)
            .where(run_is, claimable)
            .values(
                status="RUNNING",
                owner=bindparam("p_owner"),
                fence=self._next_fence(runs.c.fence, now),
                attempts=runs.c.attempts + 1,
                due_at=now + bindparam("p_lease"),
                ready_at=None,
                started_at=func.coalesce(runs.c.started_at, now),
                updated_at=now,
            )
        )
        returning = [
            runs.c.fence,
            runs.c.attempts,
            runs.c.max_attempts,
            runs.c.retry_backoff,
            runs.c.args,
        ]
        if self.is_postgres:
            self._claim_run = claim.returning(*returning, has_steps.label("has_steps"))
        else:
            self._claim_run = claim.returning(*returning, literal(True).label("has_steps"))

        self._load_steps = (
            select(*step_row)
            .where(steps.c.namespace == self.namespace, steps.c.run_id == bindparam("p_run_id"))
            .order_by(steps.c.idx)
        )

        live = and_(fenced, runs.c.cancel_requested == false())
        self._live = live
        # SQLite runs this first in the same BEGIN IMMEDIATE transaction as the write.
        self._check_live = select(runs.c.id, runs.c.cancel_requested).where(fenced)
        self._check_live_locked = (
            self._check_live.with_for_update() if self.is_postgres else self._check_live
        )
        # Insert-or-verify: a stored "ok" row is never overwritten; a failed or waiting
        # frontier step is.
        self._record_step = self._fenced_upsert(
            steps,
            {
                "namespace": literal(self.namespace),
                "run_id": bindparam("p_run_id"),
                "idx": bindparam("p_idx"),
                "name": bindparam("p_name"),
                "status": bindparam("p_status"),
                "input": bindparam("p_input"),
                "output": bindparam("p_output"),
                "error": bindparam("p_error"),
                "created_at": now,
            },
            conflict=[steps.c.namespace, steps.c.run_id, steps.c.idx],
            updates=("name", "status", "input", "output", "error", "created_at"),
            where=steps.c.status != "ok",
        ).returning(steps.c.idx)
        state = self.tables.state
        self._set_state = self._fenced_upsert(
            state,
            {
                "namespace": literal(self.namespace),
                "run_id": bindparam("p_run_id"),
                "key": bindparam("p_key"),
                "value": bindparam("p_value"),
                "updated_at": now,
            },
            conflict=[state.c.namespace, state.c.run_id, state.c.key],
            updates=("value", "updated_at"),
        ).returning(state.c.key)
        # Callers add which runs; the status check keeps a wake-up idempotent.
        self._wake = (
            update(runs)
            .where(ns, runs.c.status == "WAITING")
            .values(
                status="PENDING",
                wait_signal=None,
                ready_at=None,
                due_at=now + bindparam("p_grace"),
                dispatches=0,
                updated_at=now,
            )
            .returning(*due_row)
        )
        self._get_step = select(*step_row).where(
            steps.c.namespace == self.namespace,
            steps.c.run_id == bindparam("p_run_id"),
            steps.c.idx == bindparam("p_idx"),
        )

        terminal = (
            update(runs)
            .where(fenced)
            .values(
                status=bindparam("p_status"),
                result=bindparam("p_result"),
                error=bindparam("p_error"),
                owner=None,
                due_at=None,
                ready_at=None,
                wait_signal=None,
                finished_at=now,
                updated_at=now,
            )
            .returning(runs.c.id)
        )
        self._settle_run = self._with_notify(terminal)
        cancelled_now = runs.c.cancel_requested == true()
        self._schedule_retry = (
            update(runs)
            .where(fenced)
            .values(
                status=case((cancelled_now, "CANCELLED"), else_="PENDING"),
                error=bindparam("p_error"),
                owner=None,
                ready_at=case((cancelled_now, None), else_=now + bindparam("p_delay")),
                due_at=case((cancelled_now, None), else_=now + bindparam("p_delay")),
                finished_at=case((cancelled_now, now), else_=None),
                dispatches=0,
                updated_at=now,
            )
            .returning(runs.c.id, runs.c.status)
        )
        # Only a step failure that ended an attempt runs again; a caught one replays.
        self._mark_step_retryable = (
            update(steps)
            .where(
                steps.c.namespace == self.namespace,
                steps.c.run_id == bindparam("p_run_id"),
                steps.c.idx == bindparam("p_idx"),
                steps.c.status == "error",
            )
            .values(status="retry")
        )
        # Giving a lease back (shutdown) does not count as a failed attempt.
        given_back = {
            "status": "PENDING",
            "owner": None,
            "attempts": runs.c.attempts - 1,
            "ready_at": None,
            "due_at": now,
            "dispatches": 0,
            "updated_at": now,
        }
        self._release_run = update(runs).where(fenced).values(given_back).returning(runs.c.id)
        self._release_owner = (
            update(runs)
            .where(
                ns,
                runs.c.owner == bindparam("p_owner"),
                runs.c.status == "RUNNING",
                runs.c.id.in_(bindparam("p_ids", expanding=True)),
            )
            .values(given_back)
            .returning(runs.c.id)
        )
        self._renew_leases = (
            update(runs)
            .where(
                ns,
                runs.c.owner == bindparam("p_owner"),
                runs.c.status == "RUNNING",
                runs.c.id.in_(bindparam("p_ids", expanding=True)),
            )
            .values(due_at=now + bindparam("p_lease"))
        )

        due = (
            select(runs.c.id)
            .where(ns, runs.c.due_at.isnot(None), runs.c.due_at <= now)
            .order_by(runs.c.due_at)
            .limit(bindparam("p_limit"))
        )
        exhausted = and_(runs.c.status == "RUNNING", runs.c.attempts >= runs.c.max_attempts)
        cancelled = runs.c.cancel_requested == true()
        finished = or_(cancelled, exhausted)
        backoff = case(
            (runs.c.dispatches >= 6, 64), else_=literal_column("1").op("<<")(runs.c.dispatches)
        )
        if self.is_postgres:
            # A materialised CTE locks exactly the rows it returns; an IN (subquery) may be
            # rescanned and lock rows that the UPDATE then leaves alone.
            due_runs = due.with_for_update(skip_locked=True).cte("due_runs")
            due_runs = due_runs.prefix_with("MATERIALIZED")
            picked = runs.c.id == due_runs.c.id
        else:
            picked = runs.c.id.in_(due.scalar_subquery())
        self._sweep_due_runs = (
            update(runs)
            .where(ns, picked)
            .values(
                status=case((cancelled, "CANCELLED"), (exhausted, "FAILED"), else_="PENDING"),
                error=case(
                    (cancelled, runs.c.error),
                    (exhausted, bindparam("p_lost_error")),
                    else_=runs.c.error,
                ),
                finished_at=case((finished, now), else_=None),
                owner=None,
                wait_signal=None,
                due_at=case((finished, None), else_=now + bindparam("p_grace") * backoff),
                dispatches=runs.c.dispatches + 1,
                updated_at=now,
            )
            .returning(*due_row)
        )
        self._get_run = select(
            runs.c.id,
            runs.c.name,
            runs.c.status,
            runs.c.queue,
            runs.c.args,
            runs.c.attempts,
            runs.c.max_attempts,
            runs.c.fence,
            runs.c.owner,
            runs.c.result,
            runs.c.error,
            runs.c.cancel_requested,
            runs.c.cancel_reason,
            runs.c.wait_signal,
            runs.c.due_at,
            runs.c.created_at,
            runs.c.started_at,
            runs.c.finished_at,
        ).where(run_is)
        self._get_status = select(runs.c.status).where(run_is)

    def _with_notify(self, stmt: Any) -> Any:
        """On Postgres, wake handle waiters from the same statement (no extra round trip)."""
        if not self.is_postgres:
            return stmt
        changed = stmt.cte("changed")
        return select(
            changed.c.id,
            func.pg_notify(self.notify_channel, literal(self.namespace + ":").concat(changed.c.id)),
        ).select_from(changed)

    def _next_fence(self, fence: Any, now: Any) -> Any:
        """A fencing token that grows and is never handed out twice, even when a claim is
        lost in a database crash (claims commit asynchronously): the database clock in
        microseconds, or the old token + 1 if that is larger."""
        micros = cast(now * 1_000_000, BigInteger)
        if self.is_postgres:
            return func.greatest(fence + 1, micros)
        return func.max(fence + 1, micros)

    def _fenced_upsert(
        self,
        table: Any,
        values: dict[str, Any],
        *,
        conflict: list[Any],
        updates: Sequence[str],
        where: Any = None,
    ) -> Any:
        """INSERT ... ON CONFLICT DO UPDATE, only while the caller holds the run's lease.

        On Postgres the fencing check is part of the statement: FOR SHARE on the run row
        serialises the write with a concurrent claim. SQLite checks ``_check_live`` first
        in the same (BEGIN IMMEDIATE) transaction.
        """
        ins: Any
        if self.is_postgres:
            live_run = (
                select(self.tables.runs.c.id)
                .where(self._live)
                .with_for_update(read=True)
                .cte("live_run")
            )
            ins = postgresql.insert(table).from_select(
                list(values), select(*values.values()).select_from(live_run)
            )
        else:
            ins = sqlite.insert(table).values(values)
        return ins.on_conflict_do_update(
            index_elements=conflict,
            set_={name: ins.excluded[name] for name in updates},
            where=where,
        )

    def _one(
        self, stmt: Any, params: dict[str, Any], *, retry: bool = False, relaxed: bool = False
    ) -> tuple[Any, ...] | None:
        """Run one hot-path statement and return its first row as a tuple (or None).

        On Postgres the statement goes straight to psycopg, compiled once, on a connection
        each thread keeps: SQLAlchemy's per-execute work and a pool checkout would cost
        about a third of a step's write. SQLite takes the regular path, in a
        BEGIN IMMEDIATE transaction. ``retry``: the statement is idempotent (fenced, or
        insert-or-verify), so a connection that died (server restart, idle kill) is
        replaced and the statement sent once more. ``relaxed``: commit without waiting for
        the WAL flush (``synchronous_commit=off``), on a connection of its own.
        """
        if not self.is_postgres:
            with self._write() as conn:
                row = conn.execute(stmt, params).first()
                return None if row is None else tuple(row)
        compiled = self._compiled.get(id(stmt))
        if compiled is None:
            done = stmt.compile(dialect=self.engine.dialect)
            compiled = self._compiled[id(stmt)] = (str(done), dict(done.params))
        sql, defaults = compiled
        for last_try in (not retry, True):
            driver = self._held_connection(relaxed)
            try:
                return driver.execute(sql, {**defaults, **params}).fetchone()  # type: ignore[no-any-return]
            except psycopg.OperationalError:
                setattr(self._local, _held_slot(relaxed), None)  # reconnect next call
                driver.close()
                if last_try:
                    raise
        raise AssertionError("unreachable")

    def _held_connection(self, relaxed: bool = False) -> Any:
        """This thread's autocommit psycopg connection (a forked child opens its own)."""
        slot = _held_slot(relaxed)
        held = getattr(self._local, slot, None)
        if held is not None and held[0] == os.getpid() and not held[1].closed:
            if not _has_pending_input(held[1]):
                return held[1]
            # An idle connection with input waiting was terminated by the server (restart,
            # idle killer): replace it before sending a statement that must not be retried.
            held[1].close()
        driver = self.driver_connect("-c synchronous_commit=off" if relaxed else None)
        setattr(self._local, slot, (os.getpid(), driver))
        return driver

    def _connect_args(self) -> dict[str, Any]:
        # Named in pg_stat_activity, unless the URL names the application itself.
        return {} if "application_name" in self.url.query else {"application_name": APP_NAME}

    def driver_connect(self, options: str | None = None) -> Any:
        """A new autocommit psycopg connection to the store (hot path, LISTEN)."""
        url = self.url.set(drivername="postgresql")
        extra = self._connect_args()
        if options:
            extra["options"] = options
        return psycopg.connect(url.render_as_string(hide_password=False), autocommit=True, **extra)

    # -- start ---------------------------------------------------------------------------

    def insert_run(self, run: NewRun, connection: Connection | Session | None = None) -> bool:
        """Insert a PENDING run; False when the id is taken. ``connection``: the caller's tx."""
        params = _p(
            {
                "id": run.id,
                "name": run.name,
                "queue": run.queue,
                "args": run.args,
                "max_attempts": run.max_attempts,
                "retry_backoff": run.retry_backoff,
                "grace": run.dispatch_grace,
                "start_delay": run.start_delay,
            }
        )
        try:
            if connection is not None:
                return connection.execute(self._insert_run, params).first() is not None
            return self._one(self._insert_run, params) is not None
        except Exception as exc:
            self.raise_if_tables_missing(exc)
            raise

    def raise_if_tables_missing(self, exc: BaseException) -> None:
        """Turn "no such table" into an error that says what to run."""
        text = str(exc)
        if (
            "UndefinedTable" in type(exc).__name__
            or "does not exist" in text
            or ("no such table" in text)
        ):
            if f"{self.table_prefix}" in text:
                raise ConfigurationError(
                    f"the celery_durable tables ({self.table_prefix}*) are missing in "
                    f"{self.url.render_as_string(hide_password=True)}: run "
                    "`celery -A <your app> durable migrate` or durable.migrate() "
                    "(durable_table_prefix and durable_database_url name where they go)"
                ) from exc

    # -- run -----------------------------------------------------------------------------

    def claim_run(self, run_id: str, owner: str, lease: float) -> Claim | None:
        """Take the run if it is pending and ready, or running with an expired lease."""
        # Asynchronous commit: the claim needs no fsync of its own. Every later write of the
        # run is a synchronous commit, which flushes the WAL up to and including the claim;
        # if the database crashes before that, the claim is lost, the run is as before it,
        # and the fencing token of the lost claim (unique) matches nothing.
        row = self._one(
            self._claim_run,
            _p({"run_id": run_id, "owner": owner, "lease": lease}),
            relaxed=True,
        )
        if row is None:
            return None
        fence, attempts, max_attempts, retry_backoff, args, has_steps = row
        return Claim(fence, attempts, max_attempts, retry_backoff, args, bool(has_steps))

    def load_steps(self, run_id: str) -> dict[int, StepRecord]:
        with self._read() as conn:
            rows = conn.execute(self._load_steps, _p({"run_id": run_id})).all()
        return {r.idx: StepRecord(*r) for r in rows}

    def record_step(
        self, run_id: str, fence: int, step: StepRecord, connection: Connection | None = None
    ) -> str | StepRecord:
        """Write a step if this worker still holds the run's lease (fencing token).

        Returns RECORDED, LEASE_LOST, CANCELLED, or the already stored row when an earlier
        write of this very step committed (e.g. interrupted after the server's commit).
        """
        params = _p(
            {
                "run_id": run_id,
                "fence": fence,
                "idx": step.idx,
                "name": step.name,
                "status": step.status,
                "input": step.input,
                "output": step.output,
                "error": step.error,
            }
        )
        if connection is not None:
            written = self._record_step_on(connection, params)
        elif self.is_postgres:
            written = self._one(self._record_step, params, retry=True) is not None
        else:
            with self._write() as conn:
                written = self._record_step_on(conn, params)
        if written:
            return RECORDED
        return self._diagnose_step(run_id, fence, step.idx)

    def _record_step_on(self, conn: Connection, params: dict[str, Any]) -> bool:
        if not self.is_postgres and not self._is_live(conn, params):
            return False
        return conn.execute(self._record_step, params).first() is not None

    def _is_live(self, conn: Connection, params: dict[str, Any]) -> bool:
        row = conn.execute(self._check_live, params).first()
        return row is not None and not row.cancel_requested

    def _diagnose_step(self, run_id: str, fence: int, idx: int) -> str | StepRecord:
        run = self.get_run(run_id)
        if run is None or run.fence != fence or run.status != "RUNNING":
            return LEASE_LOST
        if run.cancel_requested:
            return CANCELLED
        with self._read() as conn:
            row = conn.execute(self._get_step, _p({"run_id": run_id, "idx": idx})).first()
        if row is None:
            return LEASE_LOST
        return StepRecord(*row)

    def settle_run(
        self,
        run_id: str,
        fence: int,
        status: str,
        *,
        result: str | None = None,
        error: str | None = None,
    ) -> bool:
        """Finish the run (SUCCEEDED, FAILED or CANCELLED) if this worker still owns it."""
        assert status in FINISHED_STATUSES
        row = self._one(
            self._settle_run,
            _p(
                {
                    "run_id": run_id,
                    "fence": fence,
                    "status": status,
                    "result": result,
                    "error": error,
                }
            ),
            retry=True,
        )
        return row is not None

    def schedule_retry(
        self, run_id: str, fence: int, delay: float, error: str, retry_step: int | None = None
    ) -> str | None:
        """Back to PENDING; the sweeper publishes it again once ``delay`` has passed.

        ``retry_step``: the failed step that ended this attempt runs again on the next one.
        A run whose cancellation was requested becomes CANCELLED instead. Returns the new
        status, or None when the lease was lost.
        """
        params = _p({"run_id": run_id, "fence": fence, "delay": delay, "error": error})
        if retry_step is None:
            row = self._one(self._schedule_retry, params, retry=True)
            return None if row is None else str(row[1])
        with self.transaction() as conn:
            found = conn.execute(self._schedule_retry, params).first()
            if found is not None and found.status == "PENDING":
                conn.execute(self._mark_step_retryable, _p({"run_id": run_id, "idx": retry_step}))
            return None if found is None else str(found.status)

    def release_run(self, run_id: str, fence: int) -> bool:
        """Give the lease back (worker shutting down): not a failed attempt."""
        params = _p({"run_id": run_id, "fence": fence})
        return self._one(self._release_run, params, retry=True) is not None

    def release_owner(self, owner: str, run_ids: Sequence[str]) -> list[str]:
        """Give back the leases an exiting process still holds on ``run_ids``."""
        if not run_ids:
            return []
        with self._write() as conn:
            rows = conn.execute(self._release_owner, _p({"owner": owner, "ids": list(run_ids)}))
            return [r.id for r in rows]

    def renew_leases(self, owner: str, run_ids: Sequence[str], lease: float) -> int:
        """One statement renews all of a process's leases."""
        if not run_ids:
            return 0
        with self._write() as conn:
            result = conn.execute(
                self._renew_leases, _p({"owner": owner, "ids": list(run_ids), "lease": lease})
            )
            return int(result.rowcount)

    # -- sweep -----------------------------------------------------------------------------

    def sweep_due_runs(self, limit: int, grace: float, lost_error: str) -> list[DueRun]:
        """Take the runs the sweeper must publish again; several sweepers never share one.

        Expired leases of runs out of attempts become FAILED here (poison-message guard);
        they are returned with that status and must not be published.
        """
        with self._write() as conn:
            rows = conn.execute(
                self._sweep_due_runs,
                _p({"limit": limit, "grace": grace, "lost_error": lost_error}),
            ).all()
        return [DueRun(*r) for r in rows]

    # -- signals, timers, state, cancellation ---------------------------------------------

    def insert_signal(
        self,
        run_id: str,
        name: str,
        payload: str,
        idempotency_key: str | None,
        max_pending: int,
    ) -> str:
        """Store a signal for a run. Returns STORED, DUPLICATE, NOT_FOUND, FULL, or the
        finished run's status."""
        runs, signals = self.tables.runs, self.tables.signals
        with self.transaction() as conn:
            # Locking the run row serialises the pending-signals cap between senders.
            lock = select(runs.c.status).where(
                runs.c.namespace == self.namespace, runs.c.id == run_id
            )
            if self.is_postgres:
                lock = lock.with_for_update()
            status = conn.execute(lock).scalar()
            if status is None:
                return NOT_FOUND
            mine = and_(signals.c.namespace == self.namespace, signals.c.run_id == run_id)
            if (
                idempotency_key is not None
                and conn.execute(
                    select(signals.c.id).where(mine, signals.c.idempotency_key == idempotency_key)
                ).first()
            ):
                return DUPLICATE
            # After the duplicate check: a retried send to a finished run is a no-op.
            if status in FINISHED_STATUSES:
                return str(status)
            pending = conn.execute(
                select(func.count())
                .select_from(signals)
                .where(mine, signals.c.consumed_at.is_(None))
            ).scalar_one()
            if pending >= max_pending:
                return FULL
            conn.execute(
                self._insert(signals).values(
                    **self._signal_row(run_id, name, payload), idempotency_key=idempotency_key
                )
            )
            return STORED

    def reject_signal(
        self, run_id: str, name: str, payload: str, idempotency_key: str | None, error: str
    ) -> None:
        """Keep a signal that could not be delivered, with the reason, for inspection."""
        signals = self.tables.signals
        with self._write() as conn:
            conn.execute(
                self._insert(signals).values(
                    **self._signal_row(run_id, name, payload),
                    # The key stays free: a resend after the cause is fixed is stored.
                    idempotency_key=None,
                    consumed_at=self._now,
                    error=error if idempotency_key is None else f"{error} (key {idempotency_key})",
                )
            )

    def _signal_row(self, run_id: str, name: str, payload: str) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "run_id": run_id,
            "name": name,
            "payload": payload,
            "created_at": self._now,
        }

    def wake_run(self, run_id: str, signal_name: str, grace: float) -> DueRun | None:
        """A run waiting for ``signal_name`` becomes PENDING; the caller publishes it."""
        runs = self.tables.runs
        stmt = self._wake.where(runs.c.id == run_id, runs.c.wait_signal == signal_name)
        with self._write() as conn:
            row = conn.execute(stmt, _p({"grace": grace})).first()
        return None if row is None else DueRun(*row)

    def wake_signalled_runs(self, grace: float) -> list[DueRun]:
        """Wake every waiting run that has a matching unconsumed signal (lost wake-ups)."""
        runs, signals = self.tables.runs, self.tables.signals
        signalled = select(signals.c.run_id).where(
            signals.c.namespace == self.namespace,
            signals.c.consumed_at.is_(None),
            signals.c.run_id == runs.c.id,
            signals.c.name == runs.c.wait_signal,
        )
        stmt = self._wake.where(runs.c.wait_signal.isnot(None), exists(signalled))
        with self._write() as conn:
            rows = conn.execute(stmt, _p({"grace": grace})).all()
        return [DueRun(*r) for r in rows]

    def consume_signal(
        self, run_id: str, fence: int, signal_name: str, step: StepRecord
    ) -> str | None:
        """Take the oldest unconsumed signal of this name and record it as ``step``'s
        output, in one transaction. Returns its payload, None, LEASE_LOST or CANCELLED."""
        signals = self.tables.signals
        params = _p({"run_id": run_id, "fence": fence})
        with self.transaction() as conn:
            live = conn.execute(self._check_live_locked, params).first()
            if live is None:
                return LEASE_LOST
            if live.cancel_requested:
                return CANCELLED
            oldest = (
                select(signals.c.id, signals.c.payload)
                .where(
                    signals.c.namespace == self.namespace,
                    signals.c.run_id == run_id,
                    signals.c.name == signal_name,
                    signals.c.consumed_at.is_(None),
                )
                .order_by(signals.c.id)
                .limit(1)
            )
            if self.is_postgres:
                oldest = oldest.with_for_update()
            signal = conn.execute(oldest).first()
            if signal is None:
                return None
            conn.execute(
                update(signals).where(signals.c.id == signal.id).values(consumed_at=self._now)
            )
            conn.execute(
                self._record_step,
                _p(
                    {
                        "run_id": run_id,
                        "fence": fence,
                        "idx": step.idx,
                        "name": step.name,
                        "status": "ok",
                        "input": step.input,
                        "output": signal.payload,
                        "error": None,
                    }
                ),
            )
            return str(signal.payload)

    def suspend_run(
        self,
        run_id: str,
        fence: int,
        step: StepRecord,
        wait_signal: str | None,
        wake_at: float | None,
    ) -> str:
        """Record the waiting step and release the run as WAITING, unless a matching
        signal is already there. Returns SUSPENDED, SIGNALLED, LEASE_LOST or CANCELLED."""
        runs, signals = self.tables.runs, self.tables.signals
        params = _p({"run_id": run_id, "fence": fence})
        with self.transaction() as conn:
            # FOR UPDATE: a concurrent wake-up waits for this transaction, then sees WAITING.
            live = conn.execute(self._check_live_locked, params).first()
            if live is None:
                return LEASE_LOST
            if live.cancel_requested:
                return CANCELLED
            if (
                wait_signal is not None
                and conn.execute(
                    select(signals.c.id)
                    .where(
                        signals.c.namespace == self.namespace,
                        signals.c.run_id == run_id,
                        signals.c.name == wait_signal,
                        signals.c.consumed_at.is_(None),
                    )
                    .limit(1)
                ).first()
            ):
                return SIGNALLED
            conn.execute(
                self._record_step,
                _p(
                    {
                        "run_id": run_id,
                        "fence": fence,
                        "idx": step.idx,
                        "name": step.name,
                        "status": "waiting",
                        "input": step.input,
                        "output": step.output,
                        "error": None,
                    }
                ),
            )
            conn.execute(
                update(runs)
                .where(
                    runs.c.namespace == self.namespace, runs.c.id == run_id, runs.c.fence == fence
                )
                .values(
                    status="WAITING",
                    owner=None,
                    wait_signal=wait_signal,
                    due_at=wake_at,
                    attempts=runs.c.attempts - 1,
                    dispatches=0,
                    updated_at=self._now,
                )
            )
            return SUSPENDED

    def set_state(self, run_id: str, fence: int, key: str, value: str) -> bool:
        """Upsert a queryable value, only while the caller holds the lease."""
        params = _p({"run_id": run_id, "fence": fence, "key": key, "value": value})
        with self._write() as conn:
            if not self.is_postgres and not self._is_live(conn, params):
                return False
            return conn.execute(self._set_state, params).first() is not None

    def get_state(self, run_id: str, key: str) -> str | None:
        state = self.tables.state
        with self._read() as conn:
            value = conn.execute(
                select(state.c.value).where(
                    state.c.namespace == self.namespace,
                    state.c.run_id == run_id,
                    state.c.key == key,
                )
            ).scalar()
        return value

    def last_step_output(self, run_id: str) -> str | None:
        steps = self.tables.steps
        with self._read() as conn:
            value = conn.execute(
                select(steps.c.output)
                .where(
                    steps.c.namespace == self.namespace,
                    steps.c.run_id == run_id,
                    steps.c.status == "ok",
                )
                .order_by(steps.c.idx.desc())
                .limit(1)
            ).scalar()
        return value

    def cancel_run(self, run_id: str, reason: str | None) -> tuple[bool, str | None]:
        """Request cancellation. A pending or waiting run is CANCELLED at once (timer and
        pending signals dropped); a running one is flagged for its next step write.
        Returns (whether cancellation was requested now, the run's status afterwards);
        the status is None when there is no such run."""
        runs, signals = self.tables.runs, self.tables.signals
        idle = runs.c.status.in_(("PENDING", "WAITING"))
        with self.transaction() as conn:
            row = conn.execute(
                update(runs)
                .where(
                    runs.c.namespace == self.namespace,
                    runs.c.id == run_id,
                    runs.c.status.in_(ACTIVE_STATUSES),
                )
                .values(
                    cancel_requested=True,
                    cancel_reason=reason,
                    status=case((idle, "CANCELLED"), else_=runs.c.status),
                    finished_at=case((idle, self._now), else_=runs.c.finished_at),
                    due_at=case((idle, None), else_=runs.c.due_at),
                    wait_signal=case((idle, None), else_=runs.c.wait_signal),
                    updated_at=self._now,
                )
                .returning(runs.c.status)
            ).first()
            if row is None:
                return False, conn.execute(
                    select(runs.c.status).where(
                        runs.c.namespace == self.namespace, runs.c.id == run_id
                    )
                ).scalar()
            if row.status == "CANCELLED":
                conn.execute(
                    update(signals)
                    .where(
                        signals.c.namespace == self.namespace,
                        signals.c.run_id == run_id,
                        signals.c.consumed_at.is_(None),
                    )
                    .values(consumed_at=self._now, error="dropped: the run was cancelled")
                )
                if self.is_postgres:
                    conn.execute(
                        select(func.pg_notify(self.notify_channel, f"{self.namespace}:{run_id}"))
                    )
            return True, str(row.status)

    def notify_finished(self, run_id: str) -> None:
        """Wake handle waiters of a run that a sweep finished (Postgres LISTEN/NOTIFY)."""
        if self.is_postgres:
            with self._write() as conn:
                conn.execute(
                    select(func.pg_notify(self.notify_channel, f"{self.namespace}:{run_id}"))
                )

    # -- reads -----------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._read() as conn:
            row = conn.execute(self._get_run, _p({"run_id": run_id})).first()
        if row is None:
            return None
        return RunRecord(**row._asdict())

    def get_status(self, run_id: str) -> str | None:
        with self._read() as conn:
            status = conn.execute(self._get_status, _p({"run_id": run_id})).scalar()
        return status

    def now(self) -> float:
        with self._read() as conn:
            value = conn.execute(select(self._now)).scalar_one()
        return float(value)


__all__ = [
    "CANCELLED",
    "Claim",
    "DueRun",
    "LEASE_LOST",
    "NewRun",
    "RECORDED",
    "RunRecord",
    "StepRecord",
    "Store",
]
