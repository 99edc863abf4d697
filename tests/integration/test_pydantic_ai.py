"""Pydantic AI agents on real workers, the broker under test and Postgres, with the
offline FunctionModel (tests/apps/agents.py): a run to completion with its events read
live and again after; a SIGKILL during a tool call (no model request made twice, only
that call again); a tool approved and one denied by a person, the run WAITING meanwhile;
model requests behind a fleet-wide limiter (one at a time, 4 a second) across two
workers."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.tools import DeferredToolResults, ToolDenied

from celery_durable import WorkflowStatus
from celery_durable.contrib.pydantic_ai import resolve_token
from tests.support.waiting import wait_until

APP = "tests.apps.agents"
ANSWER = "found widget a-1, sum 5"
RESULTS: TypeAdapter[DeferredToolResults] = TypeAdapter(DeferredToolResults)


def counts(rds: Any, key: str) -> dict[str, int]:
    names = ("model", "lookup", "add", "refund")
    return {name: int(rds.get(f"effects:{key}:{name}") or 0) for name in names}


def text_of(events: list[dict[str, Any]]) -> str:
    """The model's streamed text: its text parts' starts and deltas, in order."""
    pieces = []
    for event in events:
        if event["event_kind"] == "part_start" and event["part"]["part_kind"] == "text":
            pieces.append(event["part"]["content"])
        elif event["event_kind"] == "part_delta":
            pieces.append(event["delta"].get("content_delta", ""))
    return "".join(pieces)


def tool_calls(events: list[dict[str, Any]]) -> list[str]:
    return [e["part"]["tool_name"] for e in events if e["event_kind"] == "function_tool_call"]


def test_an_agent_run_streams_its_events_live_and_again_after(agents_app, start_worker, key, rds):
    rds.set(f"block:{key}:lookup", "1")  # the lookup tool holds until the test lets it go
    start_worker("agents", app=APP)
    handle = agents_app.support.delay(key)
    reader = handle.read_stream("agent", timeout=60)
    live = []
    for event in reader:  # while the run holds in its first tool call
        live.append(event)
        if event["event_kind"] == "function_tool_call":
            break
    assert tool_calls(live) == ["lookup"] and handle.status() is WorkflowStatus.RUNNING
    rds.delete(f"block:{key}:lookup")
    live.extend(reader)
    assert handle.get(timeout=60) == ANSWER
    assert tool_calls(live) == ["lookup", "add"]
    assert ANSWER in text_of(live)
    assert list(handle.read_stream("agent")) == live  # the same, read again after
    assert counts(rds, key) == {"model": 3, "lookup": 1, "add": 1, "refund": 0}


def test_a_sigkill_during_a_tool_call_makes_no_model_request_twice(
    agents_app, start_worker, key, rds
):
    rds.set(f"block:{key}:lookup", "1")
    first = start_worker("agents-a", app=APP)
    handle = agents_app.support.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:lookup"), 60, message="the lookup tool to start")
    first.kill()  # the model's first request is recorded; the tool call is not
    rds.delete(f"block:{key}:lookup")
    start_worker("agents-b", app=APP)
    assert handle.get(timeout=120) == ANSWER
    # Only the call the kill interrupted ran again; no model request did.
    assert counts(rds, key) == {"model": 3, "lookup": 2, "add": 1, "refund": 0}
    events = list(handle.read_stream("agent"))
    assert tool_calls(events) == ["lookup", "add"]  # no event written twice
    assert ANSWER in text_of(events)


def test_a_refund_waits_for_a_person_who_approves_or_denies_it(agents_app, start_worker, key, rds):
    start_worker("agents", app=APP)
    approved, denied = f"{key}-yes", f"{key}-no"
    runs = {name: agents_app.refund_desk.delay(name) for name in (approved, denied)}
    for name, handle in runs.items():
        wait_until(lambda n=name: rds.lrange(f"tokens:{n}", 0, -1), 60, message="a token")
        wait_until(lambda h=handle: h.status() is WorkflowStatus.WAITING, 60, message="WAITING")
    answers = {
        approved: DeferredToolResults(approvals={"r1": True}),
        denied: DeferredToolResults(approvals={"r1": ToolDenied("over the limit")}),
    }
    for name, answer in answers.items():
        (token,) = rds.lrange(f"tokens:{name}", 0, -1)
        resolve_token(agents_app.durable, token, RESULTS.dump_python(answer, mode="json"))
    assert runs[approved].get(timeout=60) == "refund: 5 refunded"
    assert runs[denied].get(timeout=60) == "refund: over the limit"
    assert counts(rds, approved)["refund"] == 1 and counts(rds, denied)["refund"] == 0
    assert counts(rds, approved)["model"] == 2  # the first request was not made again
    assert rds.llen(f"tokens:{approved}") == 1  # nobody was asked twice


def test_model_requests_behind_a_limiter_keep_its_rate_across_two_workers(
    agents_app, start_worker, key, rds
):
    start_worker.together({"name": "agents-a", "app": APP}, {"name": "agents-b", "app": APP})
    handles = [agents_app.limited_support.delay(f"{key}-{n}") for n in range(4)]
    assert [h.get(timeout=120) for h in handles] == [ANSWER] * 4
    assert sum(counts(rds, f"{key}-{n}")["model"] for n in range(4)) == 12
    assert int(rds.get(f"most-in-flight:{key}")) == 1
    # At 4 a second with a bucket of 1, 12 requests take 11 / 4 = 2.75 s from the first
    # start to the last, whichever worker made them (one at a time alone: about 1 s). The
    # margin is for when a request starts after its token, on a loaded machine.
    starts = sorted(float(t) for t in rds.lrange(f"starts:{key}", 0, -1))
    assert len(starts) == 12
    assert starts[-1] - starts[0] >= 2.2, starts
