"""The test app with Pydantic AI agents: a worker started with ``-A tests.apps.agents`` runs
these and everything of ``tests.apps.basic``. The model is Pydantic AI's offline
FunctionModel; it and the tools count their calls in Redis (``effects:<key>:model``,
``...:lookup``), across processes and SIGKILLs, and the ``lookup`` tool holds while the
test holds ``block:<key>:lookup``, so a test can kill the worker in the middle of it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from celery_durable.contrib.pydantic_ai import CeleryDurability
from tests.apps.basic import _redis, app, block_while_flagged, durable, effect

__all__ = ["app", "durable", "support", "refund_desk", "limited_support"]

# A provider's key: at most one model request at a time across the fleet, 4 a second.
provider = durable.limiter("tests.provider", concurrency=1, rate="4/s")


def _returned(messages: list[ModelMessage]) -> list[Any]:
    return [
        part.content
        for message in messages
        for part in message.parts
        if part.part_kind in ("tool-return", "retry-prompt")
    ]


def _answer(messages: list[ModelMessage], key: str) -> ModelResponse:
    """Ask for ``lookup``, then ``add``, then answer with what they returned."""
    effect(key, "model")
    back = _returned(messages)
    if not back:
        return ModelResponse(parts=[ToolCallPart("lookup", {"sku": "a-1"}, tool_call_id="c1")])
    if len(back) == 1:
        return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="c2")])
    return ModelResponse(parts=[TextPart(f"found {back[0]}, sum {back[1]}")])


def _key(messages: list[ModelMessage]) -> str:
    """The test's key: the prompt's first word."""
    prompt = messages[0].parts[-1].content  # type: ignore[union-attr]
    return str(prompt).split()[0]


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return _answer(messages, _key(messages))


async def stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
    response = _answer(messages, _key(messages))
    for part in response.parts:
        if isinstance(part, ToolCallPart):
            yield {
                0: DeltaToolCall(
                    name=part.tool_name,
                    json_args=part.args_as_json_str(),
                    tool_call_id=part.tool_call_id,
                )
            }
        else:
            words = part.content.split(" ")  # type: ignore[union-attr]
            for n, word in enumerate(words):  # a token at a time
                yield word if n == 0 else " " + word


def _tools(agent: Agent[Any, str]) -> None:
    @agent.tool
    def lookup(ctx: RunContext[Any], sku: str) -> str:
        key = _key(ctx.messages)
        effect(key, "lookup")
        block_while_flagged(key, "lookup")
        return f"widget {sku}"

    @agent.tool
    def add(ctx: RunContext[Any], a: int, b: int) -> int:
        effect(_key(ctx.messages), "add")
        return a + b


support_agent: Agent[Any, str] = Agent(
    FunctionModel(respond, stream_function=stream),
    name="support",
    capabilities=[CeleryDurability(stream="agent")],
)
_tools(support_agent)


@durable.workflow
async def support(key: str) -> str:
    """The agent's run: two model turns with a tool each, its events in stream "agent"."""
    return (await support_agent.run(f"{key} where is a-1?")).output


def one_at_a_time(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """``respond``, noting when each request of the test (``<test key>-<n>`` runs) began
    (``starts:<test key>``) and how many were in flight at once across the fleet
    (``most-in-flight:<test key>``)."""
    key = _key(messages)
    test = key.rpartition("-")[0]
    _redis.rpush(f"starts:{test}", time.time())
    now = int(_redis.incr(f"in-flight:{test}"))
    _redis.set(f"most-in-flight:{test}", max(now, int(_redis.get(f"most-in-flight:{test}") or 0)))
    try:
        time.sleep(0.05)  # long enough for another worker's request to overlap, unlimited
        return _answer(messages, key)
    finally:
        _redis.decr(f"in-flight:{test}")


limited_agent: Agent[Any, str] = Agent(
    FunctionModel(one_at_a_time),
    name="limited",
    capabilities=[CeleryDurability(model_step={"limiter": provider})],
)
_tools(limited_agent)


@durable.workflow
async def limited_support(key: str) -> str:
    """The same agent, its model requests behind a fleet-wide limiter (one at a time,
    4 a second)."""
    return (await limited_agent.run(f"{key} where is a-1?")).output


def _refund_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    effect(_key(messages), "model")
    back = _returned(messages)
    if not back:
        return ModelResponse(parts=[ToolCallPart("refund", {"amount": 5}, tool_call_id="r1")])
    return ModelResponse(parts=[TextPart(f"refund: {back[0]}")])


async def _hand_on(ctx: RunContext[Any], requests: Any, token: str) -> None:
    """Hand the resume token on (a reviewer's queue): here, Redis, for the test."""
    _redis.rpush(f"tokens:{_key(ctx.messages)}", token)


refund_agent: Agent[Any, str] = Agent(
    FunctionModel(_refund_model),
    name="refunds",
    capabilities=[CeleryDurability(), HandleDeferredToolCalls(handler=_hand_on, name="approve")],
)


@refund_agent.tool(requires_approval=True)
def refund(ctx: RunContext[Any], amount: int) -> str:
    effect(_key(ctx.messages), "refund")
    return f"{amount} refunded"


@durable.workflow
async def refund_desk(key: str) -> str:
    """A refund that waits for a person's approval."""
    return (await refund_agent.run(f"{key} refund order 7")).output
