"""The claimant's side of liveness (``engine/liveness.py``) on Postgres: an owner whose
proof of life is gone is confirmed only when seen gone twice, CONFIRM_AFTER apart, and a
process that lost a store connection confirms none."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery

from celery_durable import Durable
from celery_durable.engine.liveness import (
    CONFIRM_AFTER,
    GoneOwners,
    take_over_from_gone_owner,
)
from tests.support.builders import new_run
from tests.support.services import PG_URL
from tests.support.waiting import wait_until

DEAD = "host:7:abcdef07:live"  # declared a proof of life, holds none: gone


@pytest.fixture
def on_postgres(pg_store) -> Iterator[Durable]:  # type: ignore[no-untyped-def]
    app = Celery("liveness", broker="memory://")
    durable = Durable(app, database_url=PG_URL, table_prefix=pg_store.table_prefix, namespace="ns")
    yield durable
    durable.runtime.store.dispose()


def lease(durable: Durable) -> float:
    """The lease a claim of this process's settings takes (the window looks that far)."""
    return durable.runtime.config.lock_timeout


def test_a_gone_owner_is_confirmed_on_its_second_sighting_only(on_postgres, pg_store):
    assert pg_store.insert_run(new_run("g1"))
    assert pg_store.claim_run("g1", DEAD, lease(on_postgres)) is not None
    gone = GoneOwners(on_postgres.runtime)
    assert gone.confirmed() == []  # first sighting
    wait = gone.next_look_in()
    assert wait is not None and 0 <= wait <= CONFIRM_AFTER
    assert wait_until(gone.confirmed, CONFIRM_AFTER + 10, 0.05) == [DEAD]


def test_a_process_that_lost_a_connection_confirms_no_gone_owner(on_postgres, pg_store):
    assert pg_store.insert_run(new_run("g2"))
    assert pg_store.claim_run("g2", DEAD, lease(on_postgres)) is not None
    gone = GoneOwners(on_postgres.runtime)
    assert gone.confirmed() == []
    on_postgres.runtime.store.db.losses.note()  # as a checkout that replaced a dropped connection
    wait_until(lambda: gone.next_look_in() == 0 or gone.next_look_in() is None, 10, 0.05)
    assert gone.confirmed() == [] and gone.next_look_in() is None
    assert take_over_from_gone_owner(on_postgres.runtime, "g2", "next:live") is None
    assert pg_store.get_run("g2").owner == DEAD


def test_a_redelivery_takes_a_gone_owner_s_run_over(on_postgres, pg_store):
    assert pg_store.insert_run(new_run("g3"))
    first = pg_store.claim_run("g3", DEAD, lease(on_postgres))
    claim = take_over_from_gone_owner(on_postgres.runtime, "g3", "next:live")
    assert claim is not None and first is not None and claim.fence > first.fence
    assert pg_store.get_run("g3").owner == "next:live"
    # Its own lease, or a live one, is never taken.
    assert take_over_from_gone_owner(on_postgres.runtime, "g3", "next:live") is None
