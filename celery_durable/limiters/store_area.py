"""The limiters wing's store area, held as ``store.limiters``: a limiter's slots and tokens
(``LimiterOps``), the slot a step's record keeps for the next step and the claim that takes
a first step's (``KeptSlotOps``), the usage operators read (``LimiterUsageOps``), and the
claim of a limited workflow's run that reads its slot (``claim_limited_run``). It builds
its statements once per store; those merged into a kernel statement (the claim, the
insert, a step's record) are built from the kernel's own statement objects, so each stays
one statement. The kernel's metrics read the usage through ``LIMITER_USAGE``.

Example::

    claim = LIMITERS.of(store).claim_limited_run("r1", owner, 30.0, 10, limit)
    if claim is not None and claim.held_slot is not None: ...   # its slot, in the claim
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery_durable.limiters.buckets import Limit
from celery_durable.limiters.kept_slot_statements import KeptSlotStatements
from celery_durable.limiters.kept_slots import KeptSlotOps
from celery_durable.limiters.run_slot_statements import LimitedRunStatements
from celery_durable.limiters.slot_claims import SlotClaim
from celery_durable.limiters.statements import LimiterStatements
from celery_durable.limiters.store import LimiterOps
from celery_durable.limiters.usage import LimiterUsageOps
from celery_durable.store.areas import AreaKey
from celery_durable.store.claims import claim_of_row
from celery_durable.store.sql.build import params
from celery_durable.store.store import Store


class LimiterSql:
    """The wing's statement groups, and the kernel's run and step statements they merge
    with (a claim, an insert, a step's record)."""

    def __init__(self, store: Store) -> None:
        tables, dialect, namespace = store.tables, store.dialect, store.namespace
        self.runs = store.sql.runs
        self.steps = store.sql.steps
        self.limiters = LimiterStatements(tables, dialect, namespace)
        self.limited_runs = LimitedRunStatements(
            tables, dialect, namespace, self.runs, self.limiters
        )
        self.kept_slots = KeptSlotStatements(tables, dialect, namespace, self.steps)


class LimitersArea(LimiterOps, KeptSlotOps, LimiterUsageOps):
    """The limiters of one store's namespace; this process's view of each key's slot rows
    (``_slot_rows``, ``_slot_cursor``) is per store."""

    sql: LimiterSql

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.dialect = store.dialect
        self.sql = LimiterSql(store)
        self._slot_rows: dict[tuple[str, str], int] = {}
        self._slot_cursor: dict[tuple[str, str], int] = {}

    @property
    def on_cancelled(self) -> Sequence[Any]:
        return ()  # a cancelled run's slots are free without a write: it is not live

    def claim_limited_run(
        self, run_id: str, owner: str, lease: float, max_recoveries: int, limit: Limit
    ) -> SlotClaim | None:
        """``claim_run`` of a run behind ``limit`` (with a concurrency) that reads, in the
        claim's statement, the slot the run holds (``SlotClaim.held_slot``) and whether others
        wait for its key (``SlotClaim.slot_waited``). SQLite, where a read costs no round trip
        (and a RETURNING can't name the tables), or a limiter without a concurrency: the
        plain claim."""
        if limit.concurrency is None or not self.dialect.round_trips:
            plain = self.store.claim_run(run_id, owner, lease, max_recoveries)
            return None if plain is None else SlotClaim.of(plain)
        # Committed asynchronously, like the plain claim (``ClaimOps.claim_run``).
        values = params(run_id=run_id, owner=owner, lease=lease, max_recoveries=max_recoveries)
        values.update(params(limiter=limit.name, concurrency=limit.concurrency))
        row = self.db.one(self.sql.limited_runs.claim_limited_run, values, relaxed=True)
        if row is None:
            return None
        held = row[15]
        return SlotClaim.of(
            claim_of_row(row),
            slot_read=True,
            held_slot=None if held is None else int(held),
            slot_waited=bool(row[16]),
        )


LIMITERS: AreaKey[LimitersArea] = AreaKey("limiters", LimitersArea)
