"""A tool that needs approval, in-process (eager workflows, SQLite): the agent run waits
on a signal (WAITING, no worker held) until ``resolve_token`` approves or denies it; a
replay asks no one again and makes no model request twice."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolResults, ToolDenied

from celery_durable import Durable, InvalidArgument, WorkflowStatus
from celery_durable.contrib.pydantic_ai import CeleryDurability, fail_token, resolve_token
from celery_durable.testing import eager_workflows

RESULTS: TypeAdapter[DeferredToolResults] = TypeAdapter(DeferredToolResults)


class Refunds:
    """A model that asks for a refund, then says what came back; and the tool, counted."""

    def __init__(self) -> None:
        self.requests = 0
        self.refunded: list[int] = []
        self.tokens: list[str] = []

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests += 1
        back = [
            p for m in messages for p in m.parts if p.part_kind in ("tool-return", "retry-prompt")
        ]
        if not back:
            return ModelResponse(parts=[ToolCallPart("refund", {"amount": 5}, tool_call_id="r1")])
        return ModelResponse(parts=[TextPart(f"refund: {back[0].content}")])

    def agent(self) -> Agent[None, str]:
        async def ask_a_person(ctx: Any, requests: Any, token: str) -> None:
            self.tokens.append(token)  # hand the token on (a Slack message, say)

        agent = Agent(
            FunctionModel(self.respond),
            name="refunds",
            capabilities=[
                CeleryDurability(),
                HandleDeferredToolCalls(handler=ask_a_person, name="approve_refund"),
            ],
        )

        @agent.tool_plain(requires_approval=True)
        def refund(amount: int) -> str:
            self.refunded.append(amount)
            return f"{amount} refunded"

        return agent


@pytest.mark.parametrize(
    ("answer", "said", "refunded"),
    [
        (DeferredToolResults(approvals={"r1": True}), "refund: 5 refunded", [5]),
        (
            DeferredToolResults(approvals={"r1": ToolDenied("over the limit")}),
            "refund: over the limit",
            [],
        ),
    ],
)
def test_a_tool_that_needs_approval_waits_for_the_answer(
    durable: Durable, answer: DeferredToolResults, said: str, refunded: list[int]
) -> None:
    refunds = Refunds()
    agent = refunds.agent()

    @durable.workflow
    async def support(question: str) -> str:
        return (await agent.run(question)).output

    with eager_workflows(durable):
        handle = support.apply_async(("refund order 7",), run_id="refund-1")
        assert handle.status() is WorkflowStatus.WAITING  # holding no worker
        assert refunds.tokens == ["cd-pai:refund-1:pydantic_ai.approve_refund.0"]
        assert (
            durable.runtime.store.get_run("refund-1").wait_signal == "pydantic_ai.approve_refund.0"
        )
        resolve_token(durable, refunds.tokens[0], RESULTS.dump_python(answer, mode="json"))
        assert handle.get(timeout=30) == said
    assert refunds.refunded == refunded
    assert refunds.requests == 2  # the first request replayed, not made again
    assert refunds.tokens == ["cd-pai:refund-1:pydantic_ai.approve_refund.0"]  # asked once


def test_a_failed_token_denies_the_call_and_a_bad_token_is_named(durable: Durable) -> None:
    refunds = Refunds()
    agent = refunds.agent()

    @durable.workflow
    async def support(question: str) -> str:
        return (await agent.run(question)).output

    with eager_workflows(durable):
        handle = support.apply_async(("refund order 8",), run_id="refund-2")
        fail_token(durable, refunds.tokens[0], "no reviewer answered")
        assert "no reviewer answered" in handle.get(timeout=30)
    assert refunds.refunded == []
    with pytest.raises(InvalidArgument, match="is not a celery_durable token"):
        resolve_token(durable, "some-token", {})


def test_a_deadline_cancels_an_agent_run_waiting_for_approval(durable: Durable) -> None:
    refunds = Refunds()
    agent = refunds.agent()

    @durable.workflow(timeout=600)
    async def support(question: str) -> str:
        return (await agent.run(question)).output

    with eager_workflows(durable) as kit:
        handle = support.apply_async(("refund order 9",), run_id="refund-3")
        assert handle.status() is WorkflowStatus.WAITING
        kit.clock.advance(601)
        assert handle.status() is WorkflowStatus.CANCELLED
    assert durable.runtime.store.get_run("refund-3").cancel_reason == "deadline exceeded"
    assert refunds.refunded == [] and refunds.requests == 1


def test_an_approval_can_change_the_call_s_arguments(durable: Durable) -> None:
    from pydantic_ai.tools import ToolApproved

    refunds = Refunds()
    agent = refunds.agent()

    @durable.workflow
    async def support(question: str) -> str:
        return (await agent.run(question)).output

    with eager_workflows(durable):
        handle = support.apply_async(("refund order 10",), run_id="refund-4")
        answer = DeferredToolResults(approvals={"r1": ToolApproved(override_args={"amount": 3})})
        resolve_token(durable, refunds.tokens[0], RESULTS.dump_python(answer, mode="json"))
        assert handle.get(timeout=30) == "refund: 3 refunded"
    assert refunds.refunded == [3]


def test_the_agent_s_waits_sleep_on_a_durable_timer(durable: Durable) -> None:
    durability = CeleryDurability()

    @durable.workflow
    async def polls() -> str:
        await durability.durable_sleep(120)  # as the agent graph waits between polls
        return "polled again"

    with eager_workflows(durable) as kit:
        handle = polls.apply_async((), run_id="polls-1")
        assert handle.status() is WorkflowStatus.WAITING  # no worker held meanwhile
        kit.clock.advance(121)
        assert handle.get(timeout=10) == "polled again"
