"""Which broker's sweepers dispatch a run (``dispatcher``, migration 0007), on both
databases: two stores on one namespace, as two apps on different brokers would have."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from celery_durable.store import FanOut, StepRecord, Store
from celery_durable.store.migrations import current, upgrade
from tests.support.builders import new_run
from tests.support.services import PG_URL, drop_tables, unique
from tests.support.waiting import wait_until

REDIS, AMQP = "redis://a:6379/0", "amqp://guest@b:5672//"


def swept(store: Store, takeover: float = 3600.0) -> set[str]:
    return {r.id for r in store.sweep_due_runs(100, 60, "{}", ["wf"], 3, takeover)}


def on_broker(store: Store, dispatcher: str) -> Store:
    """Another app's store on the same tables and namespace, on broker ``dispatcher``."""
    url = store.url.render_as_string(hide_password=False)
    return Store(url, store.table_prefix, store.namespace, dispatcher=dispatcher)


@pytest.fixture
def brokers(store: Store) -> Iterator[tuple[Store, Store]]:
    redis, amqp = on_broker(store, REDIS), on_broker(store, AMQP)
    yield redis, amqp
    redis.dispose()
    amqp.dispose()


def test_a_sweep_takes_only_its_brokers_runs_and_those_from_before(store, brokers):
    redis, amqp = brokers
    assert redis.insert_run(new_run("on-redis", grace=0))
    assert amqp.insert_run(new_run("on-amqp", grace=0))
    # As a run written before migration 0007:
    assert store.insert_run(new_run("unrecorded", grace=0))
    assert swept(redis) == {"on-redis", "unrecorded"}
    assert swept(amqp) == {"on-amqp"}
    assert redis.get_status("on-amqp") == "PENDING"


def test_a_run_no_sweeper_of_its_broker_took_is_taken_once_overdue(brokers):
    redis, amqp = brokers
    assert amqp.insert_run(new_run("stranded", grace=0))
    assert swept(redis) == set()
    # Overdue by more than the takeover (0 s here): its own broker's sweepers are gone.
    assert swept(redis, takeover=0.0) == {"stranded"}


def test_the_claiming_worker_s_broker_dispatches_the_run_from_then_on(brokers):
    redis, amqp = brokers
    # Started by a producer whose broker URL reads otherwise (or was lost): the worker
    # that claims it takes it over, and so does its broker's sweeper when its lease expires.
    assert redis.insert_run(new_run("handed-over"))
    assert amqp.claim_run("handed-over", "w1", lease=0.0) is not None
    assert swept(redis) == set()
    assert swept(amqp) == {"handed-over"}


def test_items_are_swept_by_their_runs_broker(brokers):
    redis, amqp = brokers
    for store, run_id in ((redis, "fan-redis"), (amqp, "fan-amqp")):
        assert store.insert_run(new_run(run_id))
        fence = store.claim_run(run_id, "body", lease=30).fence
        step = StepRecord(0, "s", "started", '{"fanout":"map","items":1}', None, None)
        store.fanout.insert_fanout(run_id, fence, step, FanOut("s", "q", ["[[0],{}]"], 0.0))
    assert {d.run_id for d in redis.fanout.sweep_due_items(100, 60, ["s"], 3, 3600.0)} == {
        "fan-redis"
    }
    assert {d.run_id for d in amqp.fanout.sweep_due_items(100, 60, ["s"], 3, 3600.0)} == {
        "fan-amqp"
    }
    assert redis.fanout.lost_items(100, ["s"], 3, 3600.0) == []


def test_a_store_names_the_other_brokers_live_on_its_namespace(store, brokers):
    redis, amqp = brokers
    assert redis.other_dispatchers(3600) == [] and store.other_dispatchers(3600) == []
    assert amqp.insert_run(new_run("live"))
    assert redis.other_dispatchers(3600) == [AMQP]
    assert amqp.other_dispatchers(3600) == []
    assert store.other_dispatchers(3600) == []  # a store without a broker warns of none


@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_runs_written_before_0007_are_any_sweepers(database, tmp_path):
    prefix = unique("m")[:9] + "_"
    url = PG_URL if database == "postgresql" else f"sqlite:///{tmp_path}/old.sqlite3"
    old = Store(url, prefix, "ns")
    upgrade(old, "0006")
    runs = sa.Table(f"{prefix}runs", sa.MetaData(), autoload_with=old.engine)
    assert "dispatcher" not in runs.c
    row = {"namespace": "ns", "id": "old", "name": "wf", "status": "PENDING", "args": "[]"}
    with old.engine.begin() as conn:
        conn.execute(
            sa.insert(runs).values(
                **row, max_attempts=1, retry_backoff=0.0, created_at=1.0, updated_at=1.0, due_at=1.0
            )
        )
    old.dispose()
    store = Store(url, prefix, "ns", dispatcher=REDIS)
    try:
        upgrade(store)
        assert current(store) == "0015"
        assert swept(store) == {"old"}
    finally:
        store.dispose()
        if database == "postgresql":
            drop_tables(PG_URL, prefix)


def test_a_run_whose_first_publish_failed_is_any_sweepers(brokers):
    redis, amqp = brokers
    assert amqp.insert_run(new_run("unpublished", grace=0)) and amqp.insert_run(new_run("claimed"))
    assert amqp.claim_run("claimed", "w1", lease=0.0) is not None
    for run_id in ("unpublished", "claimed"):
        amqp.disown_run(run_id)  # what a producer does when its publish fails
    assert swept(redis) == {"unpublished"}
    assert swept(amqp) == {"claimed"}  # a worker's claim is never disowned


NEVER_CLAIMED = '{"type":"NeverClaimed"}'


def unclaimed_sweep(store: Store) -> dict[str, str]:
    """One sweep with a dispatch grace of 0 and durable_max_dispatches=3."""
    due = store.sweep_due_runs(
        100, 0, '{"type":"WorkerLost"}', ["wf"], 10, max_dispatches=3, unclaimed_error=NEVER_CLAIMED
    )
    return {r.id: r.status for r in due}


def test_a_run_published_again_and_again_that_no_worker_claims_fails_as_poison(store):
    """Bug (issue 41): a run whose message killed every worker before its claim was
    published again forever; the recoveries budget counts only runs that were claimed."""
    assert store.insert_run(new_run("unclaimed", grace=0))
    for n in range(1, 4):
        assert wait_until(lambda: unclaimed_sweep(store), 10) == {"unclaimed": "PENDING"}
        assert store.get_run("unclaimed").dispatches == n
    assert wait_until(lambda: unclaimed_sweep(store), 10) == {"unclaimed": "FAILED"}
    run = store.get_run("unclaimed")
    assert (run.error, run.attempts, run.recoveries) == (NEVER_CLAIMED, 0, 0)
    assert run.finished_at is not None
    assert unclaimed_sweep(store) == {}  # never published again


def test_a_claim_starts_the_count_of_unclaimed_dispatches_again(store):
    assert store.insert_run(new_run("claimed-late", grace=0))
    for _ in range(2):
        assert wait_until(lambda: unclaimed_sweep(store), 10) == {"claimed-late": "PENDING"}
    assert store.claim_run("claimed-late", "gone", lease=0) is not None
    assert store.get_run("claimed-late").dispatches == 0
    # Its worker is lost: the recovery's publish is the first since the claim, then two.
    for _ in range(3):
        assert wait_until(lambda: unclaimed_sweep(store), 10) == {"claimed-late": "PENDING"}
    assert wait_until(lambda: unclaimed_sweep(store), 10) == {"claimed-late": "FAILED"}
    assert store.get_run("claimed-late").error == NEVER_CLAIMED


def test_a_discarded_delivery_counts_and_a_starting_worker_makes_such_runs_due(store):
    """A worker without the workflow discards a run's message: one more unclaimed dispatch,
    due time unchanged (no loop between workers); a worker that has the workflow makes
    the published, unclaimed runs of it due as it starts, and leaves the rest alone."""
    for run_id, name in (("discarded", "wf"), ("queued", "wf"), ("other", "other")):
        assert store.insert_run(new_run(run_id, name=name, grace=600))
    assert store.count_discarded_run("discarded", "wf")
    assert store.count_discarded_run("other", "other")
    assert not store.count_discarded_run("discarded", "another-name")
    discarded = store.get_run("discarded")
    assert discarded.dispatches == 1 and discarded.due_at > store.now() + 300
    assert store.make_unclaimed_runs_due(["wf"]) == 1  # not "queued": never published again
    assert store.get_run("discarded").due_at <= store.now()
    assert store.get_run("queued").due_at > store.now() + 300
    assert store.get_run("other").due_at > store.now() + 300
    assert store.make_unclaimed_runs_due([]) == 0
