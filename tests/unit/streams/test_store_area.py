"""The streams area on both databases: offsets are dense and in order of first write, a
write made again at the same place is stored once, a closed stream refuses new values
(not a replay of old ones), a cancel closes a run's streams and gc deletes them."""

from __future__ import annotations

import threading
import time

import pytest

from celery_durable import StreamClosed
from celery_durable.streams.store_area import STREAMS, Where
from tests.support.builders import new_run


def test_offsets_are_dense_and_a_write_at_the_same_place_is_stored_once(store):
    store.insert_run(new_run("r1"))
    area = STREAMS.of(store)
    assert [area.write_value("r1", "t", f'"v{n}"', Where(0, True, n)) for n in range(3)] == [
        0,
        1,
        2,
    ]
    # A retry of step 0 writes its places again, then one more: only that one is new.
    assert area.write_value("r1", "t", '"other"', Where(0, True, 1)) == 1
    assert area.write_value("r1", "t", '"v3"', Where(0, True, 3)) == 3
    # The body's place 0 is not step 0's.
    assert area.write_value("r1", "t", '"body"', Where(0, False, 0)) == 4
    page = area.read("r1", "t", 0)
    assert page.values == [(0, '"v0"'), (1, '"v1"'), (2, '"v2"'), (3, '"v3"'), (4, '"body"')]
    assert (page.length, page.closed, page.done) == (5, False, False)
    assert area.read("r1", "t", 3).values == [(3, '"v3"'), (4, '"body"')]
    assert area.read("r1", "t", 5).values == []
    assert [(s.key, s.length, s.closed) for s in area.list_streams("r1")] == [("t", 5, False)]


def test_a_batch_appends_only_what_its_place_has_not_stored(store):
    store.insert_run(new_run("rb"))
    area = STREAMS.of(store)
    first_try = [(seq, f'{{"n": {seq}, "text": "\\u00e9 \\"{seq}\\""}}') for seq in range(4)]
    assert area.write_values("rb", "t", 2, True, first_try) == 4
    # The retry's batch covers the stored places and goes on: two are new.
    retry = [(seq, f'"retry {seq}"') for seq in range(2, 6)]
    assert area.write_values("rb", "t", 2, True, retry) == 2
    assert area.write_values("rb", "t", 2, True, retry) == 0  # all stored now
    # Another place (the body's place 2) has seqs of its own.
    assert area.write_values("rb", "t", 2, False, [(0, "[1, 2]"), (1, "null")]) == 2
    page = area.read("rb", "t", 0)
    assert page.values == [
        *first_try,
        (4, '"retry 4"'),
        (5, '"retry 5"'),
        (6, "[1, 2]"),
        (7, "null"),
    ]
    assert page.length == 8
    # A value's JSON text is stored as written, escapes and spaces kept.
    assert page.values[1][1] == '{"n": 1, "text": "\\u00e9 \\"1\\""}'


def test_a_closed_stream_refuses_new_values_but_not_a_replayed_write(store):
    store.insert_run(new_run("r2"))
    area = STREAMS.of(store)
    area.write_value("r2", "t", "1", Where(1, False, 0))
    area.close_stream("r2", "t")
    area.close_stream("r2", "t")  # closing again changes nothing
    assert area.write_value("r2", "t", "1", Where(1, False, 0)) == 0
    with pytest.raises(StreamClosed, match="stream 't' of workflow run 'r2' is closed"):
        area.write_value("r2", "t", "2", Where(1, False, 1))
    page = area.read("r2", "t", 0)
    assert (page.values, page.closed, page.done) == ([(0, "1")], True, True)
    # A stream closed before any write is there, empty and closed.
    area.close_stream("r2", "never")
    assert [(s.key, s.length, s.closed) for s in area.list_streams("r2")] == [
        ("never", 0, True),
        ("t", 1, True),
    ]


def test_a_write_to_a_run_that_does_not_exist_is_refused(store):
    with pytest.raises(LookupError):
        STREAMS.of(store).write_value("nobody", "t", "1", Where(0, False, 0))
    page = STREAMS.of(store).read("nobody", "t", 0)
    assert (page.status, page.values) == (None, [])


def test_concurrent_writers_take_dense_offsets_in_turn(store):
    store.insert_run(new_run("r3"))
    area = STREAMS.of(store)
    writers, each = 6, 20
    start = threading.Barrier(writers)
    taken: list[int] = []
    lock = threading.Lock()

    def write(step: int) -> None:
        start.wait()
        for seq in range(each):
            offset = area.write_value("r3", "t", str(step * 100 + seq), Where(step, True, seq))
            with lock:
                taken.append(offset)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(taken) == list(range(writers * each))
    values = [int(v) for _, v in area.read("r3", "t", 0, limit=1000).values]
    for step in range(writers):  # each writer's values in its own order
        mine = [v for v in values if v // 100 == step]
        assert mine == [step * 100 + seq for seq in range(each)]


def test_a_cancel_closes_the_run_s_streams_and_gc_deletes_them(store):
    store.insert_run(new_run("r4"))
    area = STREAMS.of(store)
    area.write_value("r4", "t", "1", Where(0, False, 0))
    assert store.cancel_run("r4", "enough").status == "CANCELLED"
    assert [s.closed for s in area.list_streams("r4")] == [True]
    assert area.read("r4", "t", 0).done
    store.insert_run(new_run("kept"))
    area.write_value("kept", "t", "1", Where(0, False, 0))
    collected = store.gc_runs("CANCELLED", time.time() + 60, 100)
    assert collected.runs == {"CANCELLED": 1}
    assert area.list_streams("r4") == [] and area.read("r4", "t", 0).values == []
    assert area.read("kept", "t", 0).values == [(0, "1")]
