"""A process's proof of life (``store/liveness.py``) on Postgres: a claim or a sweep takes
over at once the lease of an owner whose lock no session holds; a live owner's lease, and
the lease of an owner that never declared a proof of life, stand until they expire."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from celery_durable.store import ProofOfLife, Store
from tests.support.builders import new_run
from tests.support.services import unique
from tests.support.waiting import wait_until

LEASE = 30.0


@pytest.fixture
def proof(pg_store: Store) -> Iterator[ProofOfLife]:
    made = pg_store.proof_of_life(unique("host:1:"))
    assert made is not None and made.hold()
    yield made
    made.release()


def swept(store: Store) -> set[str]:
    due = store.sweep_due_runs(100, 60, "{}", ["wf"], 10, 3600.0, lease_window=2 * LEASE)
    return {r.id for r in due}


def test_a_dead_owner_s_run_is_taken_over_at_once_with_a_new_fence(pg_store, proof):
    assert pg_store.insert_run(new_run("r1"))
    first = pg_store.claim_run("r1", proof.owner, LEASE)
    assert first is not None and first.attempts == 1
    proof.release()  # the session ends, as when the process dies
    # The server ends the backend (and its locks) a moment after the socket closes.
    taken = wait_until(lambda: pg_store.claim_run("r1", "next:live", LEASE), 10)
    # A recovery, not an attempt; the dead owner's fence matches nothing any more.
    assert taken.attempts == 1 and taken.fence > first.fence
    run = pg_store.get_run("r1")
    assert (run.owner, run.recoveries) == ("next:live", 1)
    assert not pg_store.renew_lease("r1", first.fence, LEASE)


def test_a_live_owner_keeps_its_lease(pg_store, proof):
    assert pg_store.insert_run(new_run("r2"))
    assert pg_store.claim_run("r2", proof.owner, LEASE) is not None
    assert pg_store.claim_run("r2", "next:live", LEASE) is None
    assert swept(pg_store) == set()
    assert pg_store.get_run("r2").owner == proof.owner
    # The claimant's check took the key for its statement only: the owner takes it again.
    proof.release()
    assert wait_until(proof.hold, 10)


def test_an_owner_without_a_proof_of_life_keeps_its_lease(pg_store):
    # An older worker (or one behind PgBouncer without listen_url): no lock to look for.
    assert pg_store.insert_run(new_run("r3"))
    assert pg_store.claim_run("r3", "host:2:abcdef01", LEASE) is not None
    assert pg_store.claim_run("r3", "next:live", LEASE) is None
    assert swept(pg_store) == set()
    # And an owner that declared one but never took it is dead by that token.
    assert pg_store.insert_run(new_run("r4"))
    assert pg_store.claim_run("r4", "host:3:abcdef02:live", LEASE) is not None
    assert pg_store.claim_run("r4", "next:live", LEASE) is not None


def test_the_sweeper_takes_a_dead_owner_s_run_within_the_lease_window(pg_store, proof):
    assert pg_store.insert_run(new_run("r5"))
    assert pg_store.claim_run("r5", proof.owner, LEASE) is not None
    assert swept(pg_store) == set()
    proof.release()
    assert wait_until(lambda: swept(pg_store), 10) == {"r5"}
    run = pg_store.get_run("r5")
    assert (run.status, run.owner, run.attempts, run.recoveries) == ("PENDING", None, 0, 1)


def test_a_proof_of_life_whose_session_was_ended_is_taken_again(pg_store, proof):
    assert pg_store.insert_run(new_run("r6"))
    assert pg_store.claim_run("r6", proof.owner, LEASE) is not None
    engine = sa.create_engine(pg_store.url)
    with engine.connect() as conn:
        ended = conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_locks "
                "WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
                "AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(:o, 0)"
            ),
            {"o": proof.owner},
        ).all()
    engine.dispose()
    assert ended == [(True,)]  # and its backend exited
    assert proof.check()  # the heartbeat's beat: the dropped session is replaced
    assert pg_store.claim_run("r6", "next:live", LEASE) is None


def test_no_proof_of_life_where_sessions_hold_no_locks(store):
    assert (store.proof_of_life("host:4:x") is None) == (not store.is_postgres)


def test_a_missing_proof_of_life_proves_nothing_until_the_server_has_been_up_a_lease(pg_store):
    # A restart ends every session, live owners' too: until the server has been up for a
    # lease, their leases decide. Here the lease is made longer than the server's uptime.
    engine = sa.create_engine(pg_store.url)
    with engine.connect() as conn:
        uptime = conn.execute(
            sa.text("SELECT EXTRACT(EPOCH FROM now() - pg_postmaster_start_time())")
        ).scalar_one()
    engine.dispose()
    longer = float(uptime) + 3600.0
    assert pg_store.insert_run(new_run("r7"))
    assert pg_store.claim_run("r7", "host:5:abcdef03:live", longer) is not None  # no lock
    assert pg_store.claim_run("r7", "next:live", longer) is None
    due = pg_store.sweep_due_runs(100, 60, "{}", ["wf"], 10, 3600.0, lease_window=longer)
    assert "r7" not in {r.id for r in due}
    assert pg_store.claim_run("r7", "next:live", LEASE) is not None  # up longer than this
