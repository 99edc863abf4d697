"""A process's proof of life (``store/liveness.py``) on Postgres: a claimant finds the
owners whose lock no session holds, and takes their runs over with a new fence while the
lease still runs; a live owner's lease, and that of an owner that never declared a proof
of life, stand until they expire; and a process that lost a connection of its own
trusts no missing lock for a while (the server may have dropped live owners' sessions)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from celery_durable.store import ProofOfLife, Store
from tests.support.builders import new_run
from tests.support.plans import fill_analysed, plans_during
from tests.support.services import unique
from tests.support.waiting import wait_until

LEASE = 30.0
WINDOW = 2 * LEASE


@pytest.fixture
def proof(pg_store: Store) -> Iterator[ProofOfLife]:
    made = pg_store.proof_of_life(unique("host:1:"))
    assert made is not None and made.hold()
    yield made
    made.release()


def swept(store: Store, gone: list[str]) -> set[str]:
    due = store.sweep_due_runs(100, 60, "{}", ["wf"], 10, 3600.0, WINDOW, gone)
    return {r.id for r in due}


def terminate_sessions(store: Store, where: str, **values: str) -> int:
    engine = sa.create_engine(store.url)
    with engine.connect() as conn:
        ended = conn.execute(
            sa.text(f"SELECT pg_terminate_backend(pid, 10000) FROM {where}"), values
        ).all()
    engine.dispose()
    return len(ended)


def test_a_dead_owner_s_run_is_taken_over_with_a_new_fence(pg_store, proof):
    assert pg_store.insert_run(new_run("r1"))
    first = pg_store.claim_run("r1", proof.owner, LEASE)
    assert first is not None and first.attempts == 1
    proof.release()  # the session ends, as when the process dies
    # The plain claim leaves a running lease alone: only a named gone owner is taken over.
    assert pg_store.claim_run("r1", "next:live", LEASE) is None
    # The server ends the backend (and its locks) a moment after the socket closes.
    assert wait_until(lambda: pg_store.gone_owner_of_run("r1", WINDOW), 10) == proof.owner
    assert proof.owner in pg_store.find_gone_owners(WINDOW)
    assert pg_store.take_over_run("r1", "next:live", "other:live", LEASE) is None
    taken = pg_store.take_over_run("r1", "next:live", proof.owner, LEASE, quiet_for=WINDOW)
    # A recovery, not an attempt; the dead owner's fence matches nothing any more.
    assert taken is not None and taken.attempts == 1 and taken.fence > first.fence
    run = pg_store.get_run("r1")
    assert (run.owner, run.recoveries) == ("next:live", 1)
    assert not pg_store.renew_lease("r1", first.fence, LEASE)


def test_a_live_owner_keeps_its_lease(pg_store, proof):
    assert pg_store.insert_run(new_run("r2"))
    assert pg_store.claim_run("r2", proof.owner, LEASE) is not None
    assert pg_store.gone_owner_of_run("r2", WINDOW) is None
    assert proof.owner not in pg_store.find_gone_owners(WINDOW)
    assert pg_store.take_over_run("r2", "next:live", proof.owner, LEASE) is None
    assert swept(pg_store, [proof.owner]) == set()
    assert pg_store.get_run("r2").owner == proof.owner
    # The claimants' tries took the key for their statements only: the owner still holds it.
    assert proof.check()
    assert pg_store.gone_owner_of_run("r2", WINDOW) is None


def test_an_owner_without_a_proof_of_life_keeps_its_lease(pg_store):
    # An older worker (or one behind PgBouncer without listen_url): no lock to look for.
    assert pg_store.insert_run(new_run("r3"))
    assert pg_store.claim_run("r3", "host:2:abcdef01", LEASE) is not None
    assert pg_store.gone_owner_of_run("r3", WINDOW) is None
    assert pg_store.take_over_run("r3", "next:live", "host:2:abcdef01", LEASE) is None
    assert swept(pg_store, ["host:2:abcdef01"]) == set()
    # And an owner that declared one but never took it is dead by that token.
    assert pg_store.insert_run(new_run("r4"))
    assert pg_store.claim_run("r4", "host:3:abcdef02:live", LEASE) is not None
    assert pg_store.gone_owner_of_run("r4", WINDOW) == "host:3:abcdef02:live"


def test_the_sweeper_takes_only_the_gone_owners_it_names(pg_store, proof):
    assert pg_store.insert_run(new_run("r5"))
    assert pg_store.claim_run("r5", proof.owner, LEASE) is not None
    assert swept(pg_store, [proof.owner]) == set()
    proof.release()
    wait_until(lambda: pg_store.find_gone_owners(WINDOW), 10)
    assert swept(pg_store, []) == set()  # not named: its lease decides
    assert swept(pg_store, [proof.owner]) == {"r5"}
    run = pg_store.get_run("r5")
    assert (run.status, run.owner, run.attempts, run.recoveries) == ("PENDING", None, 0, 1)


def test_a_proof_of_life_whose_session_was_ended_is_taken_again(pg_store, proof):
    assert pg_store.insert_run(new_run("r6"))
    assert pg_store.claim_run("r6", proof.owner, LEASE) is not None
    assert pg_store.liveness_trusted(WINDOW)
    ended = terminate_sessions(
        pg_store,
        "pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
        "AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(:o, 0)",
        o=proof.owner,
    )
    assert ended == 1
    assert wait_until(lambda: proof.wait_for_news(0.1), 10)  # heard without a round trip
    assert proof.check()  # the dropped session is replaced
    assert pg_store.gone_owner_of_run("r6", WINDOW) is None
    # This process lost a connection: for a while it trusts no missing proof of life.
    assert not pg_store.liveness_trusted(WINDOW)


def test_a_process_that_lost_a_pooled_connection_takes_nothing_over(pg_store):
    assert pg_store.insert_run(new_run("r7"))
    owner = "host:4:abcdef04:live"  # declared, never taken: gone
    assert pg_store.claim_run("r7", owner, LEASE) is not None
    assert pg_store.liveness_trusted(WINDOW)
    with pg_store.db.read() as conn:  # the pool's one connection (last in, first out)
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    # The server drops it (a restart, an idle killer): the next checkout replaces it.
    assert terminate_sessions(pg_store, "(SELECT CAST(:pid AS int) AS pid) AS p", pid=str(pid)) == 1
    assert pg_store.get_run("r7").owner == owner
    assert not pg_store.liveness_trusted(WINDOW)
    assert pg_store.gone_owner_of_run("r7", WINDOW) == owner  # still gone, but not trusted
    assert pg_store.take_over_run("r7", "next:live", owner, LEASE, quiet_for=WINDOW) is None
    assert swept(pg_store, [owner]) == set()
    assert pg_store.get_run("r7").owner == owner


def test_no_proof_of_life_where_sessions_hold_no_locks(store):
    assert (store.proof_of_life("host:4:x") is None) == (not store.is_postgres)
    assert store.find_gone_owners(WINDOW) == [] or store.is_postgres
    assert store.liveness_trusted(WINDOW) == store.is_postgres


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
    owner = "host:5:abcdef03:live"
    assert pg_store.insert_run(new_run("r8"))
    assert pg_store.claim_run("r8", owner, longer) is not None  # no lock
    assert pg_store.gone_owner_of_run("r8", 2 * longer) is None
    assert pg_store.take_over_run("r8", "next:live", owner, longer) is None
    due = pg_store.sweep_due_runs(100, 60, "{}", ["wf"], 10, 3600.0, 2 * longer, [owner])
    assert "r8" not in {r.id for r in due}
    assert pg_store.take_over_run("r8", "next:live", owner, LEASE) is not None


def test_looking_for_gone_owners_reads_the_due_index_not_every_run(pg_store):
    """The sweeper looks for gone owners every poll: among 20,000 WAITING runs whose timers
    lie ahead, the leases due within the window are found by the due index (a volatile
    clock in the range would make it a scan of the whole table, about 22 ms at 100,000)."""
    fill_analysed(
        pg_store,
        pg_store.tables.runs.name,
        "namespace, id, name, status, queue, args, attempts, max_attempts, retry_backoff, "
        "fence, due_at, dispatches, cancel_requested, created_at, updated_at",
        "CAST(:ns AS TEXT), 'waiter-' || g, 'w', 'WAITING', 'q', '[[],{}]', 0, 3, 5.0, 1, "
        "extract(epoch FROM now()) + 60 + g * 4, 0, false, 0, 0",
        20_000,
    )
    gone: list[str] = []
    (plan,) = plans_during(pg_store, lambda: gone.extend(pg_store.find_gone_owners(60.0)), "")
    assert f"ix_{pg_store.table_prefix}runs_due" in plan and "Seq Scan" not in plan, plan
    assert gone == []
