"""Store: the operations of one namespace on the database; the SQL is in ``statements``.

The hot path of a workflow of N steps costs N + 3 commits, one round trip each on Postgres:
``insert_run`` (start), ``claim_run`` (plus ``load_steps`` only when history exists),
``record_step`` per step, ``settle_run``. Deferred steps' records (``carried``) ride on the
next of these writes, in its transaction and round trip (psycopg's pipeline mode; the
settle carries them in its own statement, ``carry_statements``). The
Postgres engine runs in autocommit mode so a single statement is its own transaction (no
BEGIN round trip); statements that must see or lock several rows at once are written as
one statement with CTEs.

Example::

    store = Store("postgresql+psycopg://postgres@127.0.0.1/test", "durable_", "default")
    store.insert_run(NewRun(id="r1", name="shop.checkout", args="[[42],{}]", ...))
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from celery_durable.core.off_loop import off_loop
from celery_durable.errors import ConfigurationError
from celery_durable.store.areas import CANCEL_PARTICIPANT, STORE_AREAS, StoreArea
from celery_durable.store.claims import ClaimOps
from celery_durable.store.db.async_connections import AsyncConnections, Changes
from celery_durable.store.db.connections import Connections, parse_listen_url, parse_url
from celery_durable.store.db.dialect import Dialect
from celery_durable.store.db.foreign import ForeignTransaction
from celery_durable.store.db.listener import Listener
from celery_durable.store.db.outage import describe
from celery_durable.store.db.unusable import app_argument
from celery_durable.store.leases import LeaseOps
from celery_durable.store.liveness import LivenessOps
from celery_durable.store.operator_methods import AdminOps
from celery_durable.store.records import (
    Cancellation,
    DueRun,
    NewRun,
    Outcome,
    RunRecord,
    StepRecord,
    StepWrite,
)
from celery_durable.store.schema import FINISHED_STATUSES, Tables, build_tables
from celery_durable.store.sql.build import params, run_params, step_params, write_carried
from celery_durable.store.sql.carry import carried_params
from celery_durable.store.sql.statements import Statements
from celery_durable.store.starts import StartOps
from celery_durable.store.sweep import SweepOps


class Store(
    ClaimOps,
    SweepOps,
    LeaseOps,
    LivenessOps,
    AdminOps,
    StartOps,
):
    """The database side of one namespace; engines are created per process, lazily.

    A wing's operations are its store area, ``store.<area>`` (``store/areas.py``): every
    area registered when the store is built. The sweeper's statements (``SweepOps``), leases
    (``LeaseOps``), claims (``ClaimOps``) and proofs of life (``LivenessOps``) live in
    their own modules; runs and steps are here.
    ``pgbouncer`` and ``listen_url``: the ``durable_pgbouncer`` and ``durable_listen_url``
    settings (the URL goes through PgBouncer; where LISTEN connects instead).
    ``dispatcher``: the app's broker (``apps.broker_identity``), recorded on the runs it
    starts and claims, whose sweeps take only that broker's runs; None: every run.
    """

    def __init__(
        self,
        url: str,
        table_prefix: str,
        namespace: str,
        *,
        pgbouncer: bool = False,
        listen_url: str = "",
        dispatcher: str | None = None,
    ) -> None:
        self.url = parse_url(url)
        self.table_prefix = table_prefix
        self.namespace = namespace
        self.tables: Tables = build_tables(table_prefix)
        self.notify_channel = f"{table_prefix}events"
        self.db = Connections(
            self.url, pgbouncer=pgbouncer, listen_url=parse_listen_url(listen_url)
        )
        # The asyncio client's reads and LISTEN (``aget_run``, ``watching``).
        self.async_db = AsyncConnections(self.db, self.notify_channel, self.namespace)
        self.dispatcher = dispatcher
        self.dialect: Dialect = self.db.dialect
        self.sql = Statements(self.tables, self.dialect, namespace, dispatcher)
        self.areas: dict[str, StoreArea] = STORE_AREAS.build(self)
        for name, area in self.areas.items():
            if hasattr(type(self), name):
                raise ConfigurationError(f"a store area can't be named {name!r}: Store has it")
            setattr(self, name, area)  # ``store.waits``: for tests and users; wings use keys
        # Run in cancel_run's transaction when the run is CANCELLED at once.
        self.on_cancelled = [s for area in self.areas.values() for s in area.on_cancelled]

    @property
    def is_postgres(self) -> bool:
        return self.dialect.name == "postgresql"

    @property
    def engine(self) -> Engine:
        return self.db.engine

    def dispose(self) -> None:
        self.db.dispose()
        Listener.close_cached(self.db)
        self.async_db.close()

    def listener(self) -> Listener:
        """Wait for runs to change (LISTEN/NOTIFY on Postgres, polling on SQLite)."""
        return Listener(self.db, self.notify_channel, self.namespace)

    def _all(self, stmt: Any, **values: Any) -> list[Any]:
        with self.db.read() as conn:
            return list(conn.execute(stmt, params(**values)).all())

    def _scalar(self, stmt: Any, **values: Any) -> Any:
        with self.db.read() as conn:
            return conn.execute(stmt, params(**values)).scalar()

    # -- start ---------------------------------------------------------------------------

    def insert_run(
        self, run: NewRun, connection: Connection | Session | ForeignTransaction | None = None
    ) -> bool:
        """Insert a PENDING run; False when the id is taken. ``connection``: the caller's tx."""
        values = run_params(run)
        statement = self.sql.runs.insert_run
        try:
            if connection is not None:
                return connection.execute(statement, values).first() is not None
            return self.db.one(statement, values) is not None
        except Exception as exc:
            self.raise_if_tables_missing(exc)
            raise

    def raise_if_tables_missing(self, exc: BaseException) -> None:
        """Turn "no such table" into an error that says what to run."""
        text = str(exc)
        missing = (
            "UndefinedTable" in type(exc).__name__
            or "does not exist" in text
            or "no such table" in text
        )
        if missing and self.table_prefix in text:
            raise ConfigurationError(
                f"the celery_durable tables ({self.table_prefix}*) are missing in "
                f"{describe(self.url)}: run "
                f"`celery -A {app_argument()} durable migrate` or durable.migrate() "
                "(durable_table_prefix and durable_database_url name where they go)"
            ) from exc

    # -- run -----------------------------------------------------------------------------

    def load_steps(self, run_id: str) -> dict[int, StepRecord]:
        rows = self._all(self.sql.steps.load_steps, run_id=run_id)
        return {r.idx: StepRecord(*r) for r in rows}

    def record_step(
        self,
        run_id: str,
        fence: int,
        step: StepRecord,
        carried: Sequence[StepRecord] = (),
    ) -> StepWrite:
        """Write a step if this worker still holds the run's lease (fencing token).

        EXISTS (with the stored row) when an earlier write of this very step committed,
        e.g. one interrupted after the server's commit. ``carried``: deferred steps'
        records, written in the same transaction (one round trip on Postgres).
        """
        values = step_params(run_id, fence, step)
        if self.dialect.locks_rows:  # the statement checks the lease itself
            row = self.one_carrying(self.sql.steps.record_step, values, run_id, fence, carried)
            written = row is not None
        else:
            with self.db.write() as conn:
                self._carry(conn, run_id, fence, carried)
                written = self._record_step_on(conn, values)
        if written:
            return StepWrite(Outcome.RECORDED)
        return self._diagnose_step(run_id, fence, step.idx)

    def one_carrying(
        self,
        stmt: Any,
        values: dict[str, Any],
        run_id: str,
        fence: int,
        carried: Sequence[StepRecord],
    ) -> Any:
        """``stmt``'s first row (an area's write too); with ``carried`` records, all in one
        transaction: on Postgres one pipelined round trip, on SQLite one BEGIN IMMEDIATE
        transaction."""
        if not carried:
            return self.db.one(stmt, values, retry=True)
        if not self.dialect.pipelines:
            with self.db.write() as conn:
                self._carry(conn, run_id, fence, carried)
                return conn.execute(stmt, values).first()
        record_step = self.sql.steps.record_step
        writes = [(record_step, step_params(run_id, fence, step)) for step in carried]
        rows = self.db.transaction_pipeline([*writes, (stmt, values)])
        return rows[len(writes)]

    def _carry(
        self, conn: Connection, run_id: str, fence: int, carried: Sequence[StepRecord]
    ) -> None:
        """``write_carried`` where the caller has not checked the lease (on Postgres each
        record checks it itself; SQLite checks once)."""
        if carried and (
            self.dialect.locks_rows or self.is_live(conn, params(run_id=run_id, fence=fence))
        ):
            write_carried(conn, self.sql.steps.record_step, run_id, fence, carried)

    def _record_step_on(self, conn: Connection, values: dict[str, Any]) -> bool:
        if not self.dialect.locks_rows and not self.is_live(conn, values):
            return False
        return conn.execute(self.sql.steps.record_step, values).first() is not None

    def is_live(self, conn: Connection, values: dict[str, Any]) -> bool:
        """Whether the caller still holds the run's lease and no cancel is pending (SQLite:
        its statements don't check the lease themselves)."""
        row = conn.execute(self.sql.steps.check_live, values).first()
        return row is not None and not row.cancel_requested

    def _diagnose_step(self, run_id: str, fence: int, idx: int) -> StepWrite:
        run = self.get_run(run_id)
        if run is None or run.fence != fence or run.status != "RUNNING":
            return StepWrite(Outcome.LEASE_LOST)
        if run.cancel_requested:
            return StepWrite(Outcome.CANCELLED)
        rows = self._all(self.sql.steps.get_step, run_id=run_id, idx=idx)
        if not rows:
            return StepWrite(Outcome.LEASE_LOST)
        return StepWrite(Outcome.EXISTS, StepRecord(*rows[0]))

    def settle_run(
        self,
        run_id: str,
        fence: int,
        status: str,
        *,
        result: str | None = None,
        error: str | None = None,
        step: StepRecord | None = None,
        carried: Sequence[StepRecord] = (),
    ) -> str | None:
        """Finish the run if this worker still owns it; returns the final status (CANCELLED
        when cancellation was requested, whatever ``status`` says) or None if the lease is
        gone. ``step``: the failed step that ended the run, and ``carried``: deferred
        steps' records, written in the same transaction.
        """
        assert status in FINISHED_STATUSES
        values = params(run_id=run_id, fence=fence, status=status, result=result, error=error)
        if step is None:
            if carried and self.dialect.writes_in_ctes:  # one statement carries them
                values = {**values, **carried_params(carried)}
                row = self.db.one(self.sql.carry.settle_run, values, retry=True)
            else:
                row = self.one_carrying(self.sql.runs.settle_run, values, run_id, fence, carried)
            return None if row is None else str(row[1])
        with self.db.transaction() as conn:
            return self.settle_on(conn, run_id, fence, values, step, carried)

    def settle_on(
        self,
        conn: Connection,
        run_id: str,
        fence: int,
        values: dict[str, Any],
        step: StepRecord | None,
        carried: Sequence[StepRecord],
    ) -> str | None:
        """``settle_run``'s writes in the caller's transaction (a child's settle locks its
        parent's row first): ``carried``, ``step`` (refused: CANCELLED if a cancel is why),
        the settle; the final status, or None if the lease is gone."""
        self._carry(conn, run_id, fence, carried)
        if step is not None and not self._record_step_on(conn, step_params(run_id, fence, step)):
            return self._settle_cancelled_on(conn, values)
        found = conn.execute(self.sql.runs.settle_run, values).first()
        return None if found is None else str(found[1])

    def _settle_cancelled_on(self, conn: Connection, values: dict[str, Any]) -> str | None:
        """The step write was refused: settle CANCELLED if that is why, else lease lost."""
        live = conn.execute(self.sql.steps.check_live, values).first()
        if live is None or not live.cancel_requested:
            return None
        found = conn.execute(self.sql.runs.settle_run, {**values, "p_status": "CANCELLED"}).first()
        return None if found is None else str(found[1])

    def schedule_retry(
        self,
        run_id: str,
        fence: int,
        delay: float,
        error: str,
        step: StepRecord | None = None,
        carried: Sequence[StepRecord] = (),
    ) -> str | None:
        """Back to PENDING; the sweeper publishes it again once ``delay`` has passed.

        ``step``: the failed step that ended this attempt, written in the same transaction
        (as "retry": it runs again on the next attempt). A run whose cancellation was
        requested becomes CANCELLED instead. Returns the new status, or None when the lease
        was lost.
        """
        values = params(run_id=run_id, fence=fence, delay=delay, error=error)
        if step is None:
            row = self.one_carrying(self.sql.runs.schedule_retry, values, run_id, fence, carried)
            return None if row is None else str(row[1])
        with self.db.transaction() as conn:
            self._carry(conn, run_id, fence, carried)
            self._record_step_on(conn, step_params(run_id, fence, step))
            found = conn.execute(self.sql.runs.schedule_retry, values).first()
            return None if found is None else str(found.status)

    # -- cancellation --------------------------------------------------------------------

    def last_step_output(self, run_id: str) -> str | None:
        value: str | None = self._scalar(self.sql.steps.last_step_output, run_id=run_id)
        return value

    def cancel_run(self, run_id: str, reason: str | None, grace: float = 60.0) -> Cancellation:
        """Request cancellation. A pending or waiting run is CANCELLED at once (timer and
        pending signals dropped); a running one is flagged for its next step write. Its
        pending items never run, and its unfinished children (not detached ones) are
        cancelled too, each in its own transaction after this one.

        ``requested``: whether cancellation was requested now; ``status``: the run's status
        afterwards (None: no such run); ``woken``: parents to publish, woken because a
        child they waited for is now cancelled."""
        values = params(run_id=run_id, reason=reason, grace=grace)
        woken: list[DueRun] = []
        tree = CANCEL_PARTICIPANT.find(self)  # items, parents, children: None if unwired
        with self.db.transaction() as conn:
            # The parent's row first: the order every writer keeps (no deadlock).
            parent = None if tree is None else tree.lock_parent(conn, values)
            row = conn.execute(self.sql.runs.cancel_run, values).first()
            if row is None:
                return Cancellation(False, conn.execute(self.sql.runs.get_status, values).scalar())
            status = str(row.status)
            if tree is not None:
                tree.cancel_items(conn, values)
            if status == "CANCELLED":
                for statement in self.on_cancelled:  # the areas' parts (drop its signals)
                    conn.execute(statement, values)
                if self.dialect.notifies:
                    conn.execute(self.sql.notify(run_id))
                if tree is not None and parent is not None:
                    up = tree.settle_parent_item(conn, parent, run_id, grace)
                    woken.extend([up] if up is not None else [])
            children = [] if tree is None else tree.children_to_cancel(conn, values)
        for child_id in children:
            because = f"its parent run {run_id!r} was cancelled" + (f": {reason}" if reason else "")
            woken.extend(self.cancel_run(child_id, because, grace).woken)
        return Cancellation(True, status, tuple(woken))

    def notify_finished(self, run_id: str) -> None:
        """Wake handle waiters of a run that a sweep finished (Postgres LISTEN/NOTIFY)."""
        if self.dialect.notifies:
            with self.db.write() as conn:
                conn.execute(self.sql.notify(run_id))

    # -- reads -----------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._all(self.sql.runs.get_run, run_id=run_id)
        return RunRecord(**rows[0]._asdict()) if rows else None

    def get_status(self, run_id: str) -> str | None:
        status: str | None = self._scalar(self.sql.runs.get_status, run_id=run_id)
        return status

    # -- reads from asyncio ------------------------------------------------------------------
    # On Postgres through psycopg's AsyncConnection; SQLite's driver has no async API, so
    # there the sync read runs on a client thread (``core.off_loop``).

    async def aget_run(self, run_id: str) -> RunRecord | None:
        """``get_run``, awaited without blocking the event loop."""
        if not self.is_postgres:
            return await off_loop(self.get_run, run_id)
        row = await self.async_db.one(self.sql.runs.get_run, params(run_id=run_id))
        return None if row is None else RunRecord(*row)

    async def aget_status(self, run_id: str) -> str | None:
        """``get_status``, awaited without blocking the event loop."""
        if not self.is_postgres:
            return await off_loop(self.get_status, run_id)
        row = await self.async_db.one(self.sql.runs.get_status, params(run_id=run_id))
        return None if row is None else str(row[0])

    def watching(self, run_id: str) -> AbstractAsyncContextManager[Changes]:
        """Wait for ``run_id`` to change from asyncio (``listener``'s counterpart): a
        NOTIFY on the event loop's LISTEN connection on Postgres, polling on SQLite."""
        return self.async_db.watching(run_id)

    def now(self) -> float:
        return float(self._scalar(self.sql.runs.now_value))
