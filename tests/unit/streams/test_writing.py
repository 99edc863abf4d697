"""The body API in-process (SQLite, eager): ``write_stream`` in a body and in a step,
sync and async, a step's retry stored once, payload limits naming the key, a write
after the close refused, and a finished run's streams closed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from celery import Celery

import celery_durable as cd
from celery_durable import Durable, PayloadTooLarge, WorkflowFailed
from celery_durable.testing import eager_workflows


def values(durable: Durable, run_id: str, key: str) -> list[Any]:
    return list(durable.get_handle(run_id).read_stream(key, timeout=5))


def test_body_and_step_writes_each_once_across_a_step_s_retry(durable: Durable) -> None:
    tries: list[int] = []

    @durable.step(max_attempts=3, backoff=0)
    def generate(count: int) -> int:
        tries.append(1)
        for n in range(count):
            cd.write_stream("tokens", n)
            if n == 2 and len(tries) == 1:
                raise ConnectionError("the model's connection dropped")
        return count

    @durable.workflow
    def chat(count: int) -> int:
        cd.write_stream("events", "begin")
        done = generate(count)
        cd.write_stream("events", "end")
        return done

    with eager_workflows(durable):
        handle = chat.apply_async((5,), run_id="chat-1")
        assert handle.get(timeout=10) == 5
    assert len(tries) == 2
    assert values(durable, "chat-1", "tokens") == [0, 1, 2, 3, 4]
    assert values(durable, "chat-1", "events") == ["begin", "end"]
    pairs = list(durable.get_handle("chat-1").read_stream("tokens", start=3, with_offsets=True))
    assert pairs == [(3, 3), (4, 4)]
    streams = durable.runtime.store.streams.list_streams("chat-1")
    assert [(s.key, s.length, s.closed) for s in streams] == [
        ("events", 2, True),
        ("tokens", 5, True),
    ]


def test_async_bodies_and_steps_write_with_a_plain_call(durable: Durable) -> None:
    @durable.step
    async def agenerate(count: int) -> int:
        for n in range(count):
            cd.write_stream("tokens", f"a{n}")
            await asyncio.sleep(0)
        return count

    @durable.step
    def plain(count: int) -> int:  # a def step of an async body runs on a thread
        for n in range(count):
            cd.write_stream("tokens", f"p{n}")
        return count

    @durable.workflow
    async def achat(count: int) -> int:
        cd.write_stream("events", "begin")
        first, second = await asyncio.gather(agenerate(2), agenerate(2))
        third = await plain(2)
        cd.close_stream("events")
        return first + second + third

    with eager_workflows(durable):
        handle = achat.apply_async((2,), run_id="achat-1")
        assert handle.get(timeout=10) == 6
    written = values(durable, "achat-1", "tokens")
    assert sorted(written[:4]) == ["a0", "a0", "a1", "a1"] and written[4:] == ["p0", "p1"]
    assert values(durable, "achat-1", "events") == ["begin"]


def test_a_value_over_the_payload_limit_names_the_key(tmp_path) -> None:
    app = Celery("limited", broker="memory://")
    app.conf.update(task_always_eager=True, durable_max_payload_bytes=1000)
    durable = Durable(app, database_url=f"sqlite:///{tmp_path}/limited.sqlite3")
    durable.migrate()

    @durable.workflow
    def big() -> None:
        cd.write_stream("blob", "x" * 2000)

    try:
        with eager_workflows(durable):
            handle = big.apply_async((), run_id="big-1")
            with pytest.raises(WorkflowFailed) as failed:
                handle.get(timeout=10)
    finally:
        durable.runtime.store.dispose()
    assert PayloadTooLarge.__name__ in failed.value.error_type
    assert "write_stream('blob')" in failed.value.error_message


def test_a_write_after_the_close_is_refused(durable: Durable) -> None:
    @durable.workflow
    def closes() -> str:
        cd.write_stream("done", 1)
        cd.close_stream("done")
        try:
            cd.write_stream("done", 2)
        except cd.StreamClosed as exc:
            return str(exc)
        return "written"

    with eager_workflows(durable):
        said = closes.apply_async((), run_id="closes-1").get(timeout=10)
    assert (
        said
        == "stream 'done' of workflow run 'closes-1' is closed: nothing more can be written to it"
    )
    assert values(durable, "closes-1", "done") == [1]


def test_outside_a_workflow_it_says_where_it_works() -> None:
    with pytest.raises(RuntimeError, match="inside a workflow or a step it runs"):
        cd.write_stream("t", 1)


def test_a_step_s_values_are_stored_in_batches_all_before_its_record(
    durable: Durable, monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery_durable.streams.store_area import StreamsArea

    stored_per_transaction: list[int] = []
    write_values = StreamsArea.write_values

    def counted(self: StreamsArea, *args: Any) -> int:
        stored = write_values(self, *args)
        stored_per_transaction.append(stored)
        return stored

    monkeypatch.setattr(StreamsArea, "write_values", counted)
    seen_by_the_next_step: list[int] = []
    tries: list[int] = []

    @durable.step
    def generate(count: int) -> int:
        tries.append(1)
        for n in range(count):
            cd.write_stream("tokens", n)
        return count

    @durable.step
    def look() -> int:
        return durable.runtime.store.streams.list_streams("batched-1")[0].length

    @durable.workflow
    def chat(count: int) -> int:
        generate(count)
        seen_by_the_next_step.append(look())
        return count

    with eager_workflows(durable):
        assert chat.apply_async((3000,), run_id="batched-1").get(timeout=30) == 3000
    assert values(durable, "batched-1", "tokens") == list(range(3000))
    assert seen_by_the_next_step == [3000]  # all stored before generate's record
    assert len(tries) == 1  # no store failed: the step's one try stored them all
    assert sum(stored_per_transaction) == 3000
    # The writer stores what piled up while it wrote: fewer transactions than values.
    assert len(stored_per_transaction) < 3000


def test_a_step_writing_to_a_stream_closed_elsewhere_fails_with_stream_closed(
    durable: Durable,
) -> None:
    @durable.step(max_attempts=1)
    def late() -> str:
        cd.write_stream("done", "too late")
        return "returned"

    @durable.workflow
    def closes_first() -> str:
        cd.close_stream("done")
        try:
            return late()
        except cd.StreamClosed as exc:  # the step's failure, raised in the body
            return f"step failed: {exc}"

    with eager_workflows(durable):
        said = closes_first.apply_async((), run_id="closed-1").get(timeout=10)
    assert said == (
        "step failed: stream 'done' of workflow run 'closed-1' is closed: "
        "nothing more can be written to it"
    )
    assert values(durable, "closed-1", "done") == []


def test_a_step_writing_faster_than_the_store_waits_and_loses_nothing(
    durable: Durable, monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery_durable.streams import batching

    monkeypatch.setattr(batching, "UNSTORED_MAX", 3)

    @durable.step
    def flood(count: int) -> int:
        for n in range(count):
            cd.write_stream("tokens", n)
        return count

    @durable.workflow
    def chat(count: int) -> int:
        return flood(count)

    with eager_workflows(durable):
        assert chat.apply_async((200,), run_id="flood-1").get(timeout=30) == 200
    assert values(durable, "flood-1", "tokens") == list(range(200))
