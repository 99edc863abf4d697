"""A limiter's slots as rows (``limiters/store.py``), on SQLite and Postgres: a run limiter's
start takes its slot in the insert's transaction; a slot is free, with no write, once its
run settles or its step is recorded, and the next hand-off gives it to the waiter of highest
priority; a key's rows grow as they are all taken, never past ``concurrency``; and on
Postgres, concurrent starters never take more slots than there are."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from celery_durable.limiters.buckets import Limit
from celery_durable.limiters.slot_claims import SlotClaim
from celery_durable.limiters.store import WHOLE_RUN
from celery_durable.store import Outcome, StepRecord, Store
from tests.support.builders import claimed, new_run
from tests.support.pgwire import messages_in, trace_text
from tests.support.services import PG_URL
from tests.support.threads import run_in_threads
from tests.support.waiting import wait_until

LEASE = 30.0


def start(store: Store, limit: Limit, run_id: str, key: str = "", priority: int = 0) -> bool:
    """Start a run of a limited workflow; whether it holds its slot (to publish)."""
    run = new_run(run_id)
    if priority:
        run = type(run)(**{**run.__dict__, "priority": priority})
    inserted, slotted = store.limiters.insert_limited_run(run, limit, key)
    assert inserted
    return slotted


def in_use(store: Store, limit: Limit, key: str = "") -> int:
    usage = {(u.limiter, u.key): u for u in store.limiters.limiter_usage({limit.name: limit})}
    found = usage.get((limit.name, key))
    return 0 if found is None else found.in_use


def slot_rows(store: Store, limit: Limit) -> int:
    slots = store.tables.limiter_slots
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(slots.c.limiter == limit.name)
            ).scalar_one()
        )


def test_a_start_takes_its_slot_and_a_settled_run_frees_it_for_the_next_waiter(store):
    limit = Limit("two", concurrency=2)
    assert start(store, limit, "a") and start(store, limit, "b")
    assert not start(store, limit, "c")  # no slot: it waits, with no due time
    waiting = store.get_run("c")
    assert (waiting.status, waiting.wait_limiter, waiting.due_at) == ("PENDING", "two", None)
    assert in_use(store, limit) == 2
    assert store.limiters.hand_off(limit, grace=60) == []  # nothing free yet
    claim = store.claim_run("a", "me", LEASE)
    assert claim is not None and store.limiters.confirm_slot(limit, "", "a") is not None
    assert store.settle_run("a", claim.fence, "SUCCEEDED", result="1") == "SUCCEEDED"
    assert in_use(store, limit) == 1  # the settle freed it: no release was written
    woken = store.limiters.hand_off(limit, grace=60)
    assert [run.id for run in woken] == ["c"]
    assert store.get_run("c").wait_limiter is None
    assert store.limiters.confirm_slot(limit, "", "c") is not None
    assert in_use(store, limit) == 2


def test_a_limited_run_s_claim_reads_the_slot_it_holds_and_whether_others_wait(pg_store):
    """On Postgres, where the read would be a round trip of its own (SQLite reads after)."""
    store = pg_store
    limit = Limit("claimed", concurrency=1)
    assert start(store, limit, "holder", key="k") and not start(store, limit, "waiter", key="k")
    assert start(store, limit, "alone", key="other")
    claim = store.limiters.claim_limited_run("holder", "me", LEASE, 10, limit)
    assert claim is not None and claim.slot_read
    assert (claim.held_slot, claim.slot_waited) == (0, True)  # "waiter" waits for key k
    # The same answer as the read the claim saves.
    assert store.limiters.confirm_slot(limit, "k", "holder", read=True) == (0, True)
    alone = store.limiters.claim_limited_run("alone", "me", LEASE, 10, limit)
    assert alone is not None and (alone.held_slot, alone.slot_waited) == (0, False)
    waiter = store.limiters.claim_limited_run("waiter", "me", LEASE, 10, limit)
    assert waiter is not None and waiter.slot_read and waiter.held_slot is None  # none held
    # Past a deploy that cut the concurrency, a slot row beyond it is not held.
    two = Limit("cut", concurrency=2)
    assert start(store, two, "first") and start(store, two, "second")
    cut = store.limiters.claim_limited_run("second", "me", LEASE, 10, Limit("cut", concurrency=1))
    assert cut is not None and cut.slot_read and cut.held_slot is None
    # The plain claim, or a limiter without a concurrency (a rate's grants): no slot read.
    assert store.insert_run(new_run("plain")) and store.insert_run(new_run("rated"))
    plain = store.claim_run("plain", "me", LEASE)
    rated = store.limiters.claim_limited_run("rated", "me", LEASE, 10, Limit("rate", rate=5.0))
    assert plain is not None and rated is not None
    assert not isinstance(plain, SlotClaim) and not rated.slot_read  # the kernel's: no slots


def test_a_step_s_record_frees_its_slot_and_priority_orders_the_waiters(store):
    limit = Limit("one", concurrency=1)
    fences = {run_id: claimed(store, run_id) for run_id in ("holder", "early", "urgent")}
    taken, waited = store.limiters.take_slot(limit, "", "holder", 0, fence=fences["holder"])
    assert (taken, waited) == (Outcome.RECORDED, False)
    assert (
        store.limiters.take_slot(limit, "", "early", 0, fence=fences["early"])[0]
        is Outcome.SUSPENDED
    )
    assert (
        store.limiters.take_slot(limit, "", "urgent", 0, priority=9, fence=fences["urgent"])[0]
        is Outcome.SUSPENDED
    )
    assert store.get_run("early").status == "WAITING"
    # Taken again while held: the same slot, and now others wait for it.
    assert store.limiters.take_slot(limit, "", "holder", 0, fence=fences["holder"]) == (
        Outcome.RECORDED,
        True,
    )
    record = StepRecord(0, "charge", "ok", "[[],{}]", '"done"', None)
    store.record_step("holder", fences["holder"], record)
    assert [run.id for run in store.limiters.hand_off(limit, grace=60)] == ["urgent"]
    assert store.limiters.confirm_slot(limit, "", "urgent", 0) is not None
    assert store.limiters.confirm_slot(limit, "", "early", 0) is None
    assert store.get_run("early").status == "WAITING"


def test_runs_waiting_at_their_start_are_served_by_priority_then_age(store):
    """Bug: a run limiter's waiters started on Postgres were queued with priority 0, so a
    run started with priority=9 behind three others was served last."""
    limit = Limit("whole", concurrency=1)
    assert start(store, limit, "holder")
    for run_id in ("first", "second", "third"):
        assert not start(store, limit, run_id)
    assert not start(store, limit, "urgent", priority=9)
    assert store.get_run("urgent").priority == 9
    served = []
    holder = "holder"
    for _ in range(4):
        claim = store.claim_run(holder, "me", LEASE)
        assert claim is not None
        assert store.settle_run(holder, claim.fence, "SUCCEEDED", result="1") == "SUCCEEDED"
        woken = store.limiters.hand_off(limit, grace=60)
        assert len(woken) == 1
        holder = woken[0].id
        served.append(holder)
    assert served == ["urgent", "first", "second", "third"]


def test_a_running_step_s_take_is_one_statement_that_commits_without_the_flush(pg_store):
    """The hot take of a limited step: one round trip, its asynchronous commit set inside
    the statement's own transaction, and no session state left behind."""
    limit = Limit("wire", concurrency=5)
    warm = claimed(pg_store, "first")  # the key's rows, made and counted once
    assert pg_store.limiters.take_slot(limit, "", "first", 0, fence=warm)[0] is Outcome.RECORDED
    fence = claimed(pg_store, "taker")
    text = trace_text(
        pg_store, lambda: pg_store.limiters.take_slot(limit, "", "taker", 0, fence=fence)
    )
    messages = messages_in(text)
    assert messages.count("F Execute") == 1 and messages.count("B ReadyForQuery") == 1
    assert "set_config(" in text and "'synchronous_commit'" in text  # the SQL, its value
    assert in_use(pg_store, limit) == 2
    with pg_store.db.read() as conn:
        assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"


def test_an_explicit_release_hands_the_slot_on_in_its_own_transaction(store):
    limit = Limit("per-key", concurrency=1)
    assert start(store, limit, "t1-a", key="t1")
    assert start(store, limit, "t2-a", key="t2")  # another key: slots of its own
    assert not start(store, limit, "t1-b", key="t1")
    woken = store.limiters.release_slot(limit, "t1", "t1-a", WHOLE_RUN, grace=60)
    assert [run.id for run in woken] == ["t1-b"]
    assert store.get_run("t1-b").due_at is not None  # due: the caller publishes it
    assert store.limiters.confirm_slot(limit, "t1", "t1-b") is not None
    assert store.limiters.confirm_slot(limit, "t1", "t1-a") is None


def test_a_key_s_rows_grow_as_they_are_all_taken_and_never_past_concurrency(store):
    limit = Limit("twenty", concurrency=20)
    assert all(start(store, limit, f"r{n}") for n in range(20))
    assert not start(store, limit, "r20")
    assert slot_rows(store, limit) == 20  # 8, 16, then 20
    raised = Limit("twenty", concurrency=25)  # a deploy raised it: the code's limit counts
    assert not start(store, raised, "r21")  # behind r20, which waited first
    assert [run.id for run in store.limiters.hand_off(raised, grace=60)] == ["r20", "r21"]
    assert in_use(store, raised) == 22
    assert slot_rows(store, raised) == 25


def test_a_key_keeps_its_rows_while_runs_finish_in_the_order_they_started(store):
    """A process's takes go round-robin from the row after its last: that row is the one it
    took longest ago, free again once runs finish oldest first. So with 28 runs in flight
    the key keeps the 32 rows its first fill grew to. (From a random row, a take now and
    then crosses more than 16 taken rows, and each time the key's rows double.)"""
    limit = Limit("flowing", concurrency=10_000)
    in_flight = [f"r{i}" for i in range(28)]
    for run_id in in_flight:
        assert start(store, limit, run_id)
    assert slot_rows(store, limit) == 32
    for i in range(28, 400):
        oldest = in_flight.pop(0)
        claim = store.claim_run(oldest, "me", LEASE)
        assert claim is not None
        assert store.settle_run(oldest, claim.fence, "SUCCEEDED", result="1") == "SUCCEEDED"
        assert start(store, limit, f"r{i}")
        in_flight.append(f"r{i}")
    assert in_use(store, limit) == 28
    assert slot_rows(store, limit) == 32


def test_concurrent_starters_never_take_more_slots_than_there_are(pg_store):
    limit = Limit("five", concurrency=5)
    slotted: list[str] = []
    barrier = threading.Barrier(8)

    def starter(worker: int) -> None:
        barrier.wait()
        for n in range(6):
            run_id = f"w{worker}-{n}"
            if start(pg_store, limit, run_id):
                slotted.append(run_id)

    errors = run_in_threads(starter, 8)
    assert not errors
    assert len(slotted) == 5
    assert in_use(pg_store, limit) == 5
    with pg_store.engine.connect() as conn:
        runs = pg_store.tables.runs
        parked = conn.execute(
            sa.select(sa.func.count()).where(runs.c.wait_limiter == "five")
        ).scalar_one()
    assert parked == 8 * 6 - 5


def test_a_rated_limiter_with_slots_takes_a_token_and_a_slot(store):
    limit = Limit("rated", concurrency=3, rate=50.0, capacity=1.0)
    fence = claimed(store, "x")
    # A new key's bucket starts empty: the first call waits for its token.
    assert store.limiters.take_slot(limit, "", "x", 0, fence=fence)[0] is Outcome.SUSPENDED
    assert in_use(store, limit) == 0
    woken = wait_until(lambda: store.limiters.hand_off(limit, grace=60), 10)
    assert [run.id for run in woken] == ["x"]
    assert store.limiters.confirm_slot(limit, "", "x", 0) is not None


def test_a_late_hand_off_gives_waiters_no_more_than_its_catch_up_of_tokens(store):
    limit = Limit("late", rate=1.0, capacity=1.0)  # slow enough that none mints meanwhile
    fences = {f"w{n}": claimed(store, f"w{n}") for n in range(20)}
    for run_id, fence in fences.items():
        assert store.limiters.take_slot(limit, "", run_id, 0, fence=fence)[0] is Outcome.SUSPENDED
    keys = store.tables.limiter_keys
    with store.engine.begin() as conn:  # the sweeper came 100 s late: 100 tokens minted
        conn.execute(sa.update(keys).values(refilled_at=keys.c.refilled_at - 100.0))
    woken = store.limiters.hand_off(limit, grace=60, catch_up=5.0)
    # 5 s of tokens at 1/s (give or take the moment's own mint), not a burst of 20.
    assert 5 <= len(woken) <= 6


def test_a_record_keeps_its_slot_for_the_next_step_only_while_nobody_waits(store):
    limit = Limit("kept", concurrency=1)
    fences = {run_id: claimed(store, run_id) for run_id in ("holder", "waiter")}
    assert (
        store.limiters.take_slot(limit, "", "holder", 0, fence=fences["holder"])[0]
        is Outcome.RECORDED
    )
    first = StepRecord(0, "charge", "ok", "[[],{}]", '"one"', None)
    stale = store.limiters.record_step_keeping_slot(
        "holder", fences["holder"] + 1, first, limit, "", 1
    )
    assert stale[0].outcome is not Outcome.RECORDED and not stale[1]  # the fence: nothing
    written, kept = store.limiters.record_step_keeping_slot(
        "holder", fences["holder"], first, limit, "", 1
    )
    assert (written.outcome, kept) == (Outcome.RECORDED, True)
    assert in_use(store, limit) == 1  # recorded, yet held: now by the run's step 1
    assert (
        store.limiters.take_slot(limit, "", "waiter", 0, fence=fences["waiter"])[0]
        is Outcome.SUSPENDED
    )
    assert store.limiters.confirm_slot(limit, "", "holder", 1) is not None
    second = StepRecord(1, "charge", "ok", "[[],{}]", '"two"', None)
    written, kept = store.limiters.record_step_keeping_slot(
        "holder", fences["holder"], second, limit, "", 2
    )
    assert (written.outcome, kept) == (Outcome.RECORDED, False)  # someone waits: freed
    assert in_use(store, limit) == 0
    assert [run.id for run in store.limiters.hand_off(limit, grace=60)] == ["waiter"]
    assert store.limiters.confirm_slot(limit, "", "waiter", 0) is not None


def test_a_first_delivery_s_claim_takes_its_first_step_s_slot_unless_others_wait(pg_store):
    store = pg_store
    limit = Limit("first", concurrency=1)
    warm = claimed(store, "warm")  # a step's take makes the key's rows; a claim makes none
    assert store.limiters.take_slot(limit, "", "warm", 0, fence=warm)[0] is Outcome.RECORDED
    store.record_step("warm", warm, StepRecord(0, "s", "ok", "[[],{}]", '"x"', None))
    assert store.insert_run(new_run("first"))
    claim = store.limiters.claim_run_taking_slot("first", "me", LEASE, 10, limit, "", 0)
    assert claim is not None and (claim.step_slot_taken, claim.step_slot_waited) == (True, False)
    assert in_use(store, limit) == 1
    assert store.limiters.take_slot(limit, "", "first", 0, fence=claim.fence) == (
        Outcome.RECORDED,
        False,
    )
    waiter = claimed(store, "waiter")
    assert store.limiters.take_slot(limit, "", "waiter", 0, fence=waiter)[0] is Outcome.SUSPENDED
    store.record_step("first", claim.fence, StepRecord(0, "s", "ok", "[[],{}]", '"x"', None))
    assert in_use(store, limit) == 0  # free, but "waiter" waits for it: no claim jumps ahead
    assert store.insert_run(new_run("late"))
    late = store.limiters.claim_run_taking_slot("late", "me", LEASE, 10, limit, "", 0)
    assert late is not None and not late.step_slot_taken and in_use(store, limit) == 0
    assert [run.id for run in store.limiters.hand_off(limit, grace=60)] == ["waiter"]


def test_a_take_that_kept_a_row_it_did_not_take_lets_it_go_before_it_waits(pg_store):
    """A take can find no slot yet keep a row's lock: a row that looked free to it, taken
    by another meanwhile, fails its recheck and stays locked (Postgres). A starter that
    then waited for the key's rows in order, with it, deadlocked with another starter
    holding the rows below it and waiting for that one. The race can't be timed from a
    test: a stand-in take locks the last row, takes nothing and holds on a while."""
    limit = Limit("five", concurrency=5)
    for n in range(5):
        assert start(pg_store, limit, f"holder-{n}")
    prefix = pg_store.tables.runs.name.removesuffix("runs")
    stand_in = sa.text(
        f"WITH kept AS MATERIALIZED (SELECT slot FROM {prefix}limiter_slots"
        " WHERE namespace = 'ns' AND limiter = 'five' AND slot = 4 FOR UPDATE),"
        " paused AS MATERIALIZED (SELECT kept.slot, pg_sleep(2) FROM kept)"
        " SELECT slot, false AS waited, false AS queued FROM paused WHERE random() < 0"
    )
    racing = Store(PG_URL, prefix, "ns")  # the starter whose take kept the row
    racing.limiters.sql.limiters.take_slot = stand_in
    try:

        def backends(like: str, waiting_on_lock: bool) -> int:
            with pg_store.engine.connect() as conn:
                return int(
                    conn.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE :like"
                            " AND state = 'active' AND (wait_event_type = 'Lock') = :lock"
                        ),
                        {"like": like, "lock": waiting_on_lock},
                    ).scalar_one()
                )

        seen_waiting: list[bool] = []

        def starter(n: int) -> None:
            if n == 0:
                assert not start(racing, limit, "racing")
            elif n == 1:  # once the stand-in holds the row, the other starter comes
                wait_until(lambda: backends("WITH kept AS%", False), 10, message="the stand-in")
                assert not start(pg_store, limit, "other")
            else:  # the interleaving happened: the other starter waited for the kept row
                pattern = f"%{prefix}limiter_slots%FOR UPDATE"
                wait_until(lambda: backends(pattern, True), 10, message="a wait for the row")
                seen_waiting.append(True)

        errors = run_in_threads(starter, 3)
        assert not errors, errors  # no DeadlockDetected: both wait for a slot
        assert seen_waiting == [True]
        assert in_use(pg_store, limit) == 5
        parked = {pg_store.get_run(r).wait_limiter for r in ("racing", "other")}
        assert parked == {"five"}
    finally:
        racing.dispose()
