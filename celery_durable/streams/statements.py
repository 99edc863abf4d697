"""The statements of streams: append a value once, close a stream, read by offset.

Example::

    sql = StreamStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.write_value_lock_stream   # INSERT INTO streams ... ON CONFLICT DO UPDATE ... RETURNING
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Integer,
    Text,
    and_,
    bindparam,
    cast,
    func,
    literal,
    select,
    true,
    update,
)

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder


class StreamStatements(Builder):
    """Append, close and read the streams of a run."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, streams, values = tables.runs, tables.streams, tables.stream_values
        of_run = and_(streams.c.namespace == namespace, streams.c.run_id == bindparam("p_run_id"))
        this = and_(of_run, streams.c.key == bindparam("p_key"))
        mine = and_(
            values.c.namespace == namespace,
            values.c.run_id == bindparam("p_run_id"),
            values.c.key == bindparam("p_key"),
        )
        self.write_value_run = select(runs.c.status, runs.c.generation).where(self.run_is)
        if dialect.notifies:
            # The write's transaction commits without waiting for the WAL flush: a value
            # a database crash loses is one whose step or body record is lost too, so it
            # is written again, at its place (the next record's flush makes it durable).
            relaxed = func.set_config("synchronous_commit", "off", true()).label("relaxed")
            self.write_value_run = self.write_value_run.add_columns(relaxed)
        # The stream's row, made at its first write and locked (ON CONFLICT DO UPDATE)
        # until the write commits: writers of one stream take their offsets in turn.
        opened = self.insert(streams).values(
            namespace=namespace,
            run_id=bindparam("p_run_id"),
            key=bindparam("p_key"),
            length=0,
            created_at=self.now,
        )
        key_columns = [streams.c.namespace, streams.c.run_id, streams.c.key]
        self.write_value_lock_stream = opened.on_conflict_do_update(
            index_elements=key_columns, set_={"length": streams.c.length}
        ).returning(streams.c.length, streams.c.closed_at)
        self.write_value_find = select(values.c.offset).where(
            mine,
            values.c.generation == bindparam("p_generation"),
            values.c.position == bindparam("p_position"),
            values.c.by_step == bindparam("p_by_step"),
            values.c.seq == bindparam("p_seq"),
        )
        self.write_value_insert = self.insert(values).values(
            namespace=namespace,
            run_id=bindparam("p_run_id"),
            key=bindparam("p_key"),
            offset=bindparam("p_offset"),
            generation=bindparam("p_generation"),
            position=bindparam("p_position"),
            by_step=bindparam("p_by_step"),
            seq=bindparam("p_seq"),
            value=bindparam("p_value"),
            created_at=self.now,
        )
        self.write_value_grow = update(streams).where(this).values(length=streams.c.length + 1)
        # A batch of one place's writes (a step's try): which of its seqs are stored, and
        # the stream grown by the ones that were not (inserted with write_value_insert).
        self.write_values_find = select(values.c.seq).where(
            mine,
            values.c.generation == bindparam("p_generation"),
            values.c.position == bindparam("p_position"),
            values.c.by_step == bindparam("p_by_step"),
            values.c.seq >= bindparam("p_first_seq"),
            values.c.seq <= bindparam("p_last_seq"),
        )
        self.write_values_grow = (
            update(streams).where(this).values(length=streams.c.length + bindparam("p_count"))
        )
        # On Postgres a batch's values go in one statement: their JSON texts joined into
        # one JSON array, taken apart by the server (a json element keeps its text as
        # written); no statement, and no quoting in the client, per value. Their seqs and
        # offsets run on from the first's (what a place has stored is always a first
        # run of its seqs, so what a batch adds to it is a run too).
        self.write_values_insert: Any = None
        if dialect.name == "postgresql":
            rows = (
                func.json_array_elements(cast(bindparam("p_values", type_=Text), JSON))
                .table_valued("value", with_ordinality="n")
                .render_derived()
            )
            written = select(
                literal(namespace),
                bindparam("p_run_id"),
                bindparam("p_key"),
                bindparam("p_first_offset", type_=BigInteger) + rows.c.n - 1,
                bindparam("p_generation"),
                bindparam("p_position"),
                bindparam("p_by_step"),
                bindparam("p_first_seq_new", type_=Integer) + rows.c.n - 1,
                cast(rows.c.value, Text),
                self.now,
            )
            columns = [
                "namespace",
                "run_id",
                "key",
                "offset",
                "generation",
                "position",
                "by_step",
                "seq",
                "value",
                "created_at",
            ]
            self.write_values_insert = self.insert(values).from_select(columns, written)
        # On Postgres the value, the length and the readers' wake-up go in one statement.
        self.write_value_append: Any = None
        if dialect.writes_in_ctes and dialect.notifies:
            added = self.write_value_insert.returning(values.c.offset).cte("added")
            grown = self.write_value_grow.returning(streams.c.length).cte("grown")
            self.write_value_append = select(
                select(added.c.offset).scalar_subquery().label("offset"),
                select(grown.c.length).scalar_subquery().label("length"),
                func.pg_notify(self._channel(), bindparam("p_payload")),
            )
        closing = opened.values(closed_at=self.now)
        self.close_stream = closing.on_conflict_do_update(
            index_elements=key_columns,
            set_={"closed_at": func.coalesce(streams.c.closed_at, closing.excluded.closed_at)},
        )
        # A run that finishes (or is cancelled) closes the streams it left open.
        self.close_run_streams = (
            update(streams).where(of_run, streams.c.closed_at.is_(None)).values(closed_at=self.now)
        )
        # On Postgres a write wakes the run's waiters (readers: LISTEN), at its commit.
        # ``p_payload``: "<namespace>:<run id>", what the run's waiters listen for.
        self.notify_readers = select(func.pg_notify(self._channel(), bindparam("p_payload")))
        self.read_run_status = select(runs.c.status).where(self.run_is)
        self.read_head = select(streams.c.length, streams.c.closed_at).where(this)
        self.read_values = (
            select(values.c.offset, values.c.value)
            .where(
                mine,
                values.c.offset >= bindparam("p_start"),
                values.c.offset < bindparam("p_end"),
            )
            .order_by(values.c.offset)
            .limit(bindparam("p_limit"))
        )
        self.list_streams = (
            select(streams.c.key, streams.c.length, streams.c.closed_at)
            .where(of_run)
            .order_by(streams.c.key)
        )

    def _channel(self) -> str:
        return f"{self.tables.runs.name.removesuffix('runs')}events"
