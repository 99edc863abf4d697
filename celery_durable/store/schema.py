"""The tables, as SQLAlchemy Core, built for a table prefix.

Times are float seconds since the epoch, taken from the database's clock (see
``Store.now``) so that workers with skewed clocks still agree on lease expiry.

Example::

    tables = build_tables("durable_")
    tables.runs.name    # 'durable_runs'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    false,
    text,
    true,
)

ACTIVE_STATUSES = ("PENDING", "RUNNING", "WAITING")
FINISHED_STATUSES = ("SUCCEEDED", "FAILED", "CANCELLED")
# A run enters these statuses when it suspends or finishes, never on the hot path's insert
# and claim: the partial indexes that list and count runs hold only these, so they cost
# nothing until a run settles. PENDING and RUNNING runs always carry due_at and are found
# through the sweeper's index instead.
SETTLED_STATUSES = ("WAITING", *FINISHED_STATUSES)
DUE_STATUSES = ("PENDING", "RUNNING")

# A BIGINT primary key autoincrements in Postgres; SQLite only does so for INTEGER.
_SERIAL = BigInteger().with_variant(Integer(), "sqlite")


@dataclasses.dataclass(frozen=True)
class Tables:
    metadata: MetaData
    runs: Table
    steps: Table
    signals: Table
    state: Table
    items: Table
    limiter_keys: Table
    limiter_grants: Table
    limiter_slots: Table
    schedules: Table
    schedule_slots: Table
    actions: Table
    streams: Table
    stream_values: Table
    updates: Table


def settled_indexes(prefix: str) -> dict[str, tuple[str, ...]]:
    """The partial indexes over settled runs (``SETTLED_STATUSES``), by name.

    ``status``: a page of one status, newest first, and the oldest runs for ``gc``;
    ``workflow``: the same within one workflow; ``counts``: the narrowest key, so counting a
    million runs reads a few MB (btree deduplication stores each key once). No ``id``:
    ties on created_at are broken by an incremental sort of the few rows that share it.
    """
    return {
        f"ix_{prefix}runs_status": ("namespace", "status", "created_at"),
        f"ix_{prefix}runs_workflow": ("namespace", "name", "status", "created_at"),
        f"ix_{prefix}runs_counts": ("namespace", "name", "status"),
    }


def build_tables(prefix: str) -> Tables:
    metadata = MetaData()
    runs = Table(
        f"{prefix}runs",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("id", String(255), primary_key=True),
        Column("name", String(255), nullable=False),
        Column("status", String(16), nullable=False),
        Column("queue", String(255)),
        Column("args", Text, nullable=False),
        Column("attempts", Integer, nullable=False, server_default=text("0")),
        Column("max_attempts", Integer, nullable=False),
        # Times the run's worker was lost (lease expired): infrastructure, not the run's
        # fault, so not an attempt; capped by durable_max_recoveries (the poison guard).
        Column("recoveries", Integer, nullable=False, server_default=text("0")),
        Column("retry_backoff", Float, nullable=False),
        Column("owner", String(255)),
        Column("fence", BigInteger, nullable=False, server_default=text("0")),
        # When the sweeper must look at the run: dispatch again (PENDING), the lease
        # expires (RUNNING) or the timer fires (WAITING). NULL once finished.
        Column("due_at", Float),
        # A retried run may not be claimed before this time (its backoff).
        Column("ready_at", Float),
        Column("dispatches", Integer, nullable=False, server_default=text("0")),
        Column("wait_signal", String(255)),
        Column("result", Text),
        Column("error", Text),
        Column("cancel_requested", Boolean, nullable=False, server_default=false()),
        Column("cancel_reason", Text),
        Column("created_at", Float, nullable=False),
        Column("started_at", Float),
        Column("finished_at", Float),
        Column("updated_at", Float, nullable=False),
        # A child run's parent, and the parent's step index that started it.
        Column("parent_id", String(255)),
        Column("parent_idx", Integer),
        # The run waits for items (parallel steps, children) whose rows are "awaited".
        Column("wait_items", Boolean, nullable=False, server_default=false()),
        # A fork's origin run and the step it was forked at (steps before it were copied).
        Column("forked_from", String(255)),
        Column("forked_from_step", Integer),
        # Sagas and continue_as_new (migration 0005): see that revision's notes.
        Column("compensable", Boolean, nullable=False, server_default=false()),
        Column("compensation", String(32)),
        Column("generation", Integer, nullable=False, server_default=text("0")),
        Column("continued_from", String(255)),
        Column("continued_as", String(255)),
        # The broker whose sweepers dispatch the run (migration 0007): the app's that
        # started it, then each claimer's. NULL (runs written before): any sweeper's.
        Column("dispatcher", String(255)),
        # What the run tells Celery when it settles (migration 0008): its callbacks,
        # chain, chord, group and result-backend report, as JSON; NULL: nothing.
        Column("canvas", Text),
        # Its outbox entry: when it finished owing that report. The worker that settled
        # it reports it and clears this; the sweeper, once it is older than the grace.
        Column("outbox_at", Float),
        # The limiter the run waits for (migration 0009): WAITING at a step, or PENDING
        # with no message (the whole run is limited); and its waiters' order.
        Column("wait_limiter", String(255)),
        Column("priority", Integer),
        # The run's dedup key, unique per workflow among active runs, and its deadline.
        Column("dedup_key", String(255)),
        Column("deadline_at", Float),
    )
    # Only active runs carry due_at, so sweeps stay fast with millions of finished runs.
    Index(
        f"ix_{prefix}runs_due",
        runs.c.namespace,
        runs.c.due_at,
        postgresql_where=runs.c.due_at.isnot(None),
        sqlite_where=runs.c.due_at.isnot(None),
    )
    Index(
        f"ix_{prefix}runs_outbox",
        runs.c.namespace,
        runs.c.outbox_at,
        postgresql_where=runs.c.outbox_at.isnot(None),
        sqlite_where=runs.c.outbox_at.isnot(None),
    )
    active = runs.c.status.in_(ACTIVE_STATUSES)
    deduped = and_(runs.c.dedup_key.isnot(None), active)
    Index(
        f"ux_{prefix}runs_dedup",
        runs.c.namespace,
        runs.c.name,
        runs.c.dedup_key,
        unique=True,
        postgresql_where=deduped,
        sqlite_where=deduped,
    )
    timed = and_(runs.c.deadline_at.isnot(None), active)
    Index(
        f"ix_{prefix}runs_deadline",
        runs.c.namespace,
        runs.c.deadline_at,
        postgresql_where=timed,
        sqlite_where=timed,
    )
    settled = runs.c.status.in_(SETTLED_STATUSES)
    for name, columns in settled_indexes(prefix).items():
        Index(
            name,
            *(runs.c[column] for column in columns),
            postgresql_where=settled,
            sqlite_where=settled,
        )
    steps = Table(
        f"{prefix}steps",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("run_id", String(255), primary_key=True),
        Column("idx", Integer, primary_key=True),
        Column("name", String(255), nullable=False),
        Column("status", String(8), nullable=False),
        Column("input", Text, nullable=False),
        Column("output", Text),
        Column("error", Text),
        Column("created_at", Float, nullable=False),
        Column("duration", Float),
        # When the step began and the run's attempt that ran it (migration 0006).
        Column("started_at", Float),
        Column("attempt", Integer),
    )
    signals = Table(
        f"{prefix}signals",
        metadata,
        Column("id", _SERIAL, primary_key=True, autoincrement=True),
        Column("namespace", String(200), nullable=False),
        Column("run_id", String(255), nullable=False),
        Column("name", String(255), nullable=False),
        Column("payload", Text, nullable=False),
        Column("idempotency_key", String(255)),
        Column("created_at", Float, nullable=False),
        Column("consumed_at", Float),
        # Why a signal was rejected (run missing, finished, cancelled or full); kept, not lost.
        Column("error", Text),
        UniqueConstraint("namespace", "run_id", "idempotency_key", name=f"uq_{prefix}signals_key"),
    )
    Index(
        f"ix_{prefix}signals_pending",
        signals.c.namespace,
        signals.c.run_id,
        signals.c.name,
        signals.c.id,
        postgresql_where=signals.c.consumed_at.is_(None),
        sqlite_where=signals.c.consumed_at.is_(None),
    )
    state = Table(
        f"{prefix}state",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("run_id", String(255), primary_key=True),
        Column("key", String(255), primary_key=True),
        Column("value", Text, nullable=False),
        Column("updated_at", Float, nullable=False),
    )
    # Runs that wait for items: the sweeper's backstop for a lost wake-up reads only these.
    Index(
        f"ix_{prefix}runs_wait_items",
        runs.c.namespace,
        postgresql_where=runs.c.wait_items == true(),
        sqlite_where=runs.c.wait_items == true(),
    )
    items = build_items(metadata, prefix)
    limiter_keys, limiter_grants, limiter_slots = build_limiters(metadata, prefix)
    schedules, schedule_slots = build_schedules(metadata, prefix)
    # What operators did to a run, and who (migration 0013); gc deletes them with it.
    actions = Table(
        f"{prefix}actions",
        metadata,
        Column("id", _SERIAL, primary_key=True, autoincrement=True),
        Column("namespace", String(200), nullable=False),
        Column("run_id", String(255), nullable=False),
        Column("action", String(32), nullable=False),
        Column("actor", String(255)),
        Column("detail", Text),
        Column("created_at", Float, nullable=False),
    )
    Index(f"ix_{prefix}actions_run", actions.c.namespace, actions.c.run_id, actions.c.id)
    streams, stream_values = build_streams(metadata, prefix)
    updates = build_updates(metadata, prefix)
    return Tables(
        metadata,
        runs,
        steps,
        signals,
        state,
        items,
        limiter_keys,
        limiter_grants,
        limiter_slots,
        schedules,
        schedule_slots,
        actions,
        streams,
        stream_values,
        updates,
    )


def build_streams(metadata: MetaData, prefix: str) -> tuple[Table, Table]:
    """A run's streams (migration 0014): each key's ``length`` (the next value's offset)
    and when it was closed; and their values, by dense offset. A value's write is known by
    where the run made it (``generation``; ``position``: the step's index, or the body's
    place between steps, ``by_step`` telling which; ``seq``: its order there), so a
    retried or replayed write is stored once. gc deletes both with their run."""
    streams = Table(
        f"{prefix}streams",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("run_id", String(255), primary_key=True),
        Column("key", String(255), primary_key=True),
        Column("length", BigInteger, nullable=False, server_default=text("0")),
        Column("created_at", Float, nullable=False),
        Column("closed_at", Float),
    )
    values = Table(
        f"{prefix}stream_values",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("run_id", String(255), primary_key=True),
        Column("key", String(255), primary_key=True),
        Column("offset", BigInteger, primary_key=True),
        Column("generation", Integer, nullable=False),
        Column("position", Integer, nullable=False),
        Column("by_step", Boolean, nullable=False),
        Column("seq", Integer, nullable=False),
        Column("value", Text, nullable=False),
        Column("created_at", Float, nullable=False),
        UniqueConstraint(
            "namespace",
            "run_id",
            "key",
            "generation",
            "position",
            "by_step",
            "seq",
            name=f"uq_{prefix}stream_values_write",
        ),
    )
    return streams, values


def build_updates(metadata: MetaData, prefix: str) -> Table:
    """Requests sent to a run with ``handle.update`` (migration 0015), and their answers.

    ``status`` is "pending" (stored, not taken yet), "received" (the body took it at step
    ``idx``), "answered" or "rejected" (the body's ``reply`` or ``reject``; ``answer`` holds
    the value as JSON, or the reason) or "refused" (the workflow's validator refused it:
    no step records it; ``answer`` holds the reason). A request of a run that finished
    unanswered is "not handled" where it is read. gc deletes them with the run."""
    updates = Table(
        f"{prefix}updates",
        metadata,
        Column("id", _SERIAL, primary_key=True, autoincrement=True),
        Column("namespace", String(200), nullable=False),
        Column("run_id", String(255), nullable=False),
        Column("name", String(255), nullable=False),
        Column("payload", Text, nullable=False),
        Column("idempotency_key", String(255)),
        Column("status", String(16), nullable=False),
        Column("idx", Integer),
        Column("answer", Text),
        Column("created_at", Float, nullable=False),
        Column("answered_at", Float),
        UniqueConstraint("namespace", "run_id", "idempotency_key", name=f"uq_{prefix}updates_key"),
    )
    Index(f"ix_{prefix}updates_run", updates.c.namespace, updates.c.run_id, updates.c.id)
    Index(
        f"ix_{prefix}updates_pending",
        updates.c.namespace,
        updates.c.created_at,
        postgresql_where=updates.c.status == "pending",
        sqlite_where=updates.c.status == "pending",
    )
    return updates


def build_schedules(metadata: MetaData, prefix: str) -> tuple[Table, Table]:
    """A schedule as its code last declared it (``cron`` or ``every``, in ``tz``; the
    start's ``args`` and ``options`` as JSON; ``definition``, a digest of them all), its
    operators' ``paused``, its ``disabled_at`` once the code dropped it, and where it
    stands; and the slots it fired, skipped or buffered (the key that fires a slot once)."""
    schedules = Table(
        f"{prefix}schedules",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("name", String(255), primary_key=True),
        Column("workflow", String(255), nullable=False),
        Column("cron", String(255)),
        Column("every", Float),
        Column("tz", String(64), nullable=False),
        Column("args", Text, nullable=False),
        Column("options", Text, nullable=False),
        Column("overlap", String(16), nullable=False),
        Column("catchup", String(8), nullable=False),
        Column("catchup_window", Float, nullable=False),
        Column("definition", String(64), nullable=False),
        Column("paused", Boolean, nullable=False, server_default=false()),
        Column("disabled_at", Float),
        Column("next_slot", Float),
        Column("last_slot", Float),
        Column("last_run_id", String(255)),
        Column("buffered_slot", Float),
        Column("missed", Integer, nullable=False, server_default=text("0")),
        Column("skipped", Integer, nullable=False, server_default=text("0")),
        Column("declared_at", Float, nullable=False),
        Column("updated_at", Float, nullable=False),
    )
    Index(f"ix_{prefix}schedules_due", schedules.c.namespace, schedules.c.next_slot)
    slots = Table(
        f"{prefix}schedule_slots",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("schedule", String(255), primary_key=True),
        Column("slot", Float, primary_key=True),
        Column("outcome", String(16), nullable=False),
        Column("run_id", String(255)),
        Column("fired_at", Float, nullable=False),
    )
    return schedules, slots


def build_limiters(metadata: MetaData, prefix: str) -> tuple[Table, Table, Table]:
    """A limiter's keys (each its token bucket, and the row a rate's grants lock), grants
    (a run, or a run's step, waiting for a slot in ``priority`` then ``requested_at`` order,
    or holding a rate's token: ``held``) and slots (``slot`` 0, 1, ... of a key, each held by
    at most one run or step at a time: ``run_id`` and ``idx``). ``idx`` is the step's index,
    -1 for a whole run's slot."""
    keys = Table(
        f"{prefix}limiter_keys",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("limiter", String(255), primary_key=True),
        Column("key", String(255), primary_key=True),
        Column("tokens", Float, nullable=False),
        Column("refilled_at", Float, nullable=False),
    )
    grants = Table(
        f"{prefix}limiter_grants",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("run_id", String(255), primary_key=True),
        Column("idx", Integer, primary_key=True),
        Column("limiter", String(255), primary_key=True),
        Column("key", String(255), nullable=False),
        Column("held", Boolean, nullable=False),
        Column("priority", Integer, nullable=False),
        Column("requested_at", Float, nullable=False),
        Column("granted_at", Float),
    )
    # The next waiters, in the order they are served (migration 0011): read in index order.
    Index(
        f"ix_{prefix}limiter_grants_next",
        grants.c.namespace,
        grants.c.limiter,
        grants.c.key,
        grants.c.held,
        grants.c.priority.desc(),
        grants.c.requested_at,
        grants.c.run_id,
    )
    slots = Table(
        f"{prefix}limiter_slots",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("limiter", String(255), primary_key=True),
        Column("key", String(255), primary_key=True),
        Column("slot", Integer, primary_key=True),
        Column("run_id", String(255)),
        Column("idx", Integer),
        Column("taken_at", Float),
    )
    Index(
        f"ix_{prefix}limiter_slots_holder",
        slots.c.namespace,
        slots.c.run_id,
        slots.c.idx,
        postgresql_where=slots.c.run_id.isnot(None),
        sqlite_where=slots.c.run_id.isnot(None),
    )
    return keys, grants, slots


def build_items(metadata: MetaData, prefix: str) -> Table:
    """The sub-records of a fan-out step: one per parallel item, remote step or child.

    ``status`` is "pending" (to run; ``dispatches`` > 0 once published), "running",
    "ok", "error", "cancelled" (with its run) or "revoked" (its task id was revoked).
    ``due_at`` is when the sweeper must look at it: the
    dispatch grace while pending, the lease while running, the end of a retry backoff;
    NULL for a settled item and for a child's item (the child run is swept as a run).
    ``finished_at`` is NULL exactly while the item is unsettled.
    """
    items = Table(
        f"{prefix}items",
        metadata,
        Column("namespace", String(200), primary_key=True),
        Column("run_id", String(255), primary_key=True),
        Column("idx", Integer, primary_key=True),
        Column("item", Integer, primary_key=True),
        Column("name", String(255), nullable=False),
        Column("status", String(16), nullable=False),
        Column("queue", String(255)),
        Column("input", Text, nullable=False),
        Column("output", Text),
        Column("error", Text),
        Column("attempts", Integer, nullable=False, server_default=text("0")),
        Column("recoveries", Integer, nullable=False, server_default=text("0")),
        Column("dispatches", Integer, nullable=False, server_default=text("0")),
        # The claim's token: only its holder may record the outcome (first writer wins).
        Column("owner", String(255)),
        # The parent body waits for this item (set when it suspends on the item's index).
        Column("awaited", Boolean, nullable=False, server_default=false()),
        Column("child_id", String(255)),
        # A detached child survives its parent's cancellation.
        Column("detached", Boolean, nullable=False, server_default=false()),
        Column("due_at", Float),
        Column("created_at", Float, nullable=False),
        Column("finished_at", Float),
        # The batch size it was first published with (None: one task per item), so that
        # the sweeper publishes it again as a batch of the same items (migration 0012).
        Column("batch_size", Integer),
    )
    Index(
        f"ix_{prefix}items_due",
        items.c.namespace,
        items.c.due_at,
        postgresql_where=items.c.due_at.isnot(None),
        sqlite_where=items.c.due_at.isnot(None),
    )
    # Unsettled items of a run: the wake-up check reads only these, never a run's
    # thousands of settled items.
    Index(
        f"ix_{prefix}items_open",
        items.c.namespace,
        items.c.run_id,
        items.c.idx,
        postgresql_where=items.c.finished_at.is_(None),
        sqlite_where=items.c.finished_at.is_(None),
    )
    Index(
        f"ix_{prefix}items_children",
        items.c.namespace,
        items.c.child_id,
        postgresql_where=open_child(items),
        sqlite_where=open_child(items),
    )
    return items


def open_child(items: Table) -> Any:
    """The predicate of the children index: queries must repeat it to use the index."""
    return and_(items.c.child_id.isnot(None), items.c.finished_at.is_(None))
