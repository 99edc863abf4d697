"""The streams wing's store area, held as ``store.streams``: append a value to a run's
stream once, close streams, read values by offset, list a run's streams.

Its ``on_cancelled`` statement (close the run's streams) runs in the kernel's
``cancel_run`` transaction, so a reader of a run cancelled while waiting ends.

Example::

    STREAMS.of(store).write_value("r1", "tokens", '"Hel"', Where(3, True, 0))
    STREAMS.of(store).read("r1", "tokens", start=0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

from celery_durable.errors import StreamClosed
from celery_durable.store.areas import AreaKey
from celery_durable.store.schema import FINISHED_STATUSES
from celery_durable.store.sql.build import params
from celery_durable.store.store import Store
from celery_durable.streams.statements import StreamStatements

# Values one read of a stream returns at most (a reader far behind reads in pages).
PAGE = 500


class Where(NamedTuple):
    """Where a run wrote a value: what makes a retried or replayed write the same one
    (with the run's generation, read in the write's transaction).

    ``position``: the index of the step that wrote it, or for a write in the body, the
    index the body's next step takes; ``by_step`` tells which. ``seq``: the write's
    order there (0, 1, ...), counted again by each try of a step and each delivery."""

    position: int
    by_step: bool
    seq: int


@dataclasses.dataclass(frozen=True)
class StreamInfo:
    """One stream of a run, as ``durable show`` lists it."""

    key: str
    length: int
    closed: bool


@dataclasses.dataclass(frozen=True)
class StreamPage:
    """One read of a stream from an offset: the run's status (None: no such run), the
    stream's length when read (0: nothing written yet), whether it can grow no more
    (closed, or its run finished), and its values from the offset on, (offset, JSON)
    each, at most ``PAGE``."""

    status: str | None
    length: int
    closed: bool
    values: list[tuple[int, str]]

    @property
    def done(self) -> bool:
        """No value will follow ``length``: the stream is closed, or its run finished."""
        return self.closed or self.status in FINISHED_STATUSES


class StreamsArea:
    """The streams of one store's namespace."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.sql = StreamStatements(store.tables, store.dialect, store.namespace)

    @property
    def on_cancelled(self) -> Sequence[Any]:
        return (self.sql.close_run_streams,)

    def write_value(self, run_id: str, key: str, value: str, where: Where) -> int:
        """Append ``value`` (JSON) to the run's stream ``key`` and return its offset; the
        offset it has already when a write at ``where`` is stored (a retry, a replay).
        StreamClosed when the stream is closed or the run finished; LookupError when the
        run does not exist."""
        sql = self.sql
        values = params(
            run_id=run_id,
            key=key,
            value=value,
            position=where.position,
            by_step=where.by_step,
            seq=where.seq,
        )
        with self.db.transaction() as conn:
            run = conn.execute(sql.write_value_run, values).first()
            if run is None:
                raise LookupError(run_id)
            values["p_generation"] = int(run.generation)
            head = conn.execute(sql.write_value_lock_stream, values).one()
            found = conn.execute(sql.write_value_find, values).scalar()
            if found is not None:  # before the close: a replay after it is no error
                return int(found)
            if head.closed_at is not None or run.status in FINISHED_STATUSES:
                raise StreamClosed(run_id, key)
            offset = int(head.length)
            values["p_offset"] = offset
            if sql.write_value_append is not None:  # Postgres: one statement
                values["p_payload"] = self._payload(run_id)
                conn.execute(sql.write_value_append, values)
            else:
                conn.execute(sql.write_value_insert, values)
                conn.execute(sql.write_value_grow, values)
                self._notify(conn, run_id)
        return offset

    def write_values(
        self, run_id: str, key: str, position: int, by_step: bool, batch: list[tuple[int, str]]
    ) -> int:
        """Append a batch of writes made at one place (``(seq, JSON)`` each, in order) in
        one transaction; those stored already (a retry's, a replay's) are skipped. How
        many were appended. StreamClosed when the stream is closed or the run finished
        and one is new; LookupError when the run does not exist."""
        sql = self.sql
        first, last = batch[0][0], batch[-1][0]
        values = params(
            run_id=run_id,
            key=key,
            position=position,
            by_step=by_step,
            first_seq=first,
            last_seq=last,
        )
        with self.db.transaction() as conn:
            run = conn.execute(sql.write_value_run, values).first()
            if run is None:
                raise LookupError(run_id)
            values["p_generation"] = int(run.generation)
            head = conn.execute(sql.write_value_lock_stream, values).one()
            stored = set(conn.execute(sql.write_values_find, values).scalars())
            new = [(seq, value) for seq, value in batch if seq not in stored]
            if not new:
                return 0
            if head.closed_at is not None or run.status in FINISHED_STATUSES:
                raise StreamClosed(run_id, key)
            offset = int(head.length)
            seqs_run_on = new[-1][0] - new[0][0] == len(new) - 1
            if sql.write_values_insert is not None and seqs_run_on:  # Postgres: one statement
                batched = params(
                    first_offset=offset,
                    first_seq_new=new[0][0],
                    values="[" + ",".join(value for _, value in new) + "]",
                )
                conn.execute(sql.write_values_insert, {**values, **batched})
            else:
                rows = [
                    {**values, "p_offset": offset + i, "p_seq": seq, "p_value": value}
                    for i, (seq, value) in enumerate(new)
                ]
                conn.execute(sql.write_value_insert, rows)
            conn.execute(sql.write_values_grow, {**values, "p_count": len(new)})
            self._notify(conn, run_id)
        return len(new)

    def close_stream(self, run_id: str, key: str) -> None:
        """Close the run's stream ``key`` (made, empty, if it was never written); readers
        end once they read its last value. Closing it again changes nothing."""
        values = params(run_id=run_id, key=key)
        with self.db.transaction() as conn:
            conn.execute(self.sql.close_stream, values)
            self._notify(conn, run_id)

    def close_run_streams(self, run_id: str) -> int:
        """Close the streams the run left open; how many."""
        values = params(run_id=run_id)
        with self.db.transaction() as conn:
            closed = int(conn.execute(self.sql.close_run_streams, values).rowcount)
            if closed:
                self._notify(conn, run_id)
        return closed

    def _notify(self, conn: Any, run_id: str) -> None:
        """Wake the run's waiting readers when the transaction commits (Postgres)."""
        if self.store.dialect.notifies:
            conn.execute(self.sql.notify_readers, params(payload=self._payload(run_id)))

    def _payload(self, run_id: str) -> str:
        return f"{self.store.namespace}:{run_id}"

    def read(self, run_id: str, key: str, start: int, limit: int = PAGE) -> StreamPage:
        """The stream's values from offset ``start`` (see ``StreamPage``)."""
        sql = self.sql
        values = params(run_id=run_id, key=key, start=start, limit=limit)
        with self.db.read() as conn:
            # The run, then the head, then the values: a run seen finished wrote no more
            # than the head says, and every value below the head's length is committed.
            status = conn.execute(sql.read_run_status, values).scalar()
            head = conn.execute(sql.read_head, values).first()
            if head is None:
                return StreamPage(status, 0, False, [])
            values["p_end"] = int(head.length)
            rows = conn.execute(sql.read_values, values).all()
        found = [(int(offset), str(value)) for offset, value in rows]
        return StreamPage(status, int(head.length), head.closed_at is not None, found)

    def list_streams(self, run_id: str) -> list[StreamInfo]:
        """The run's streams, by key."""
        with self.db.read() as conn:
            rows = conn.execute(self.sql.list_streams, params(run_id=run_id)).all()
        return [StreamInfo(str(r.key), int(r.length), r.closed_at is not None) for r in rows]


STREAMS: AreaKey[StreamsArea] = AreaKey("streams", StreamsArea)
