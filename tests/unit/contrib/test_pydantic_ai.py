"""The Pydantic AI capability in-process (eager workflows, SQLite), on Pydantic AI's
offline FunctionModel: each model request and tool call is a step named by the journal
namer (pinned here: a rename orphans recorded runs), a replay makes no request or call
again, and outside a workflow the agent runs as without the capability."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from celery_durable import Durable, WorkflowFailed
from celery_durable.contrib.pydantic_ai import CeleryDurability
from celery_durable.testing import eager_workflows
from tests.support.event_loop import run_apart


class Counted:
    """An offline model that asks for ``lookup`` then ``add``, then answers with their
    results; it counts its requests (what a provider would bill)."""

    def __init__(self) -> None:
        self.requests = 0

    def _next(self, messages: list[ModelMessage]) -> ModelResponse:
        self.requests += 1
        returned = [
            part
            for message in messages
            for part in message.parts
            if getattr(part, "part_kind", "") == "tool-return"
        ]
        if not returned:
            return ModelResponse(parts=[ToolCallPart("lookup", {"sku": "a-1"}, tool_call_id="c1")])
        if len(returned) == 1:
            return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="c2")])
        return ModelResponse(
            parts=[TextPart(f"found {returned[0].content}, sum {returned[1].content}")]
        )

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return self._next(messages)

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
        response = self._next(messages)
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
                yield part.content  # type: ignore[union-attr]


def agent_of(
    model: Counted, calls: list[str], name: str = "support", **options: Any
) -> Agent[None, str]:
    agent = Agent(
        FunctionModel(model.respond, stream_function=model.stream),
        name=name,
        capabilities=[CeleryDurability(**options)],
    )

    @agent.tool_plain
    def lookup(sku: str) -> str:
        calls.append(f"lookup {sku}")
        return f"widget {sku}"

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        calls.append(f"add {a} {b}")
        return a + b

    return agent


def steps_of(durable: Durable, run_id: str) -> list[Any]:
    recorded = durable.runtime.store.load_steps(run_id)
    return [recorded[index] for index in sorted(recorded)]


def test_an_agent_run_is_steps_and_a_replay_pays_for_nothing_again(durable: Durable) -> None:
    model, calls = Counted(), []
    agent = agent_of(model, calls)
    attempts: list[int] = []

    @durable.workflow(max_attempts=2, retry_backoff=0)
    async def support(question: str) -> str:
        result = await agent.run(question)
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("the worker's network dropped after the agent ran")
        return result.output

    with eager_workflows(durable) as kit:
        handle = support.apply_async(("where is a-1?",), run_id="agent-1")
        kit.sweep()  # the retry is due: eager mode runs it at once
        answer = handle.get(timeout=30)
    assert answer == "found widget a-1, sum 5"
    assert len(attempts) == 2  # the body ran twice...
    assert model.requests == 3  # ...and the model was asked 3 times, not 6
    assert calls == ["lookup a-1", "add 2 3"]  # each tool once
    assert [s.name for s in steps_of(durable, "agent-1")] == [
        "support__model.request",
        "support__function_toolset__<agent>.call_tool:lookup",
        "support__model.request",
        "support__function_toolset__<agent>.call_tool:add",
        "support__model.request",
    ]
    tool_steps = [s for s in steps_of(durable, "agent-1") if "call_tool" in s.name]
    assert [s.input for s in tool_steps] == [
        '[[{"tool_call_id":"c1"}],{}]',  # (args, kwargs) as every step's input
        '[[{"tool_call_id":"c2"}],{}]',
    ]


def test_the_agent_s_events_are_written_to_the_run_s_stream_once(durable: Durable) -> None:
    model, calls = Counted(), []
    handled: list[str] = []

    async def also(ctx: Any, events: Any) -> None:
        async for event in events:
            handled.append(event.event_kind)

    agent = agent_of(model, calls, stream="agent", event_stream_handler=also)
    attempts: list[int] = []

    @durable.workflow(max_attempts=2, retry_backoff=0)
    async def support(question: str) -> str:
        result = await agent.run(question)
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("dropped after the agent ran")
        return result.output

    with eager_workflows(durable) as kit:
        handle = support.apply_async(("where is a-1?",), run_id="agent-events")
        kit.sweep()
        assert handle.get(timeout=30) == "found widget a-1, sum 5"
    events = list(handle.read_stream("agent", timeout=5))
    kinds = [e["event_kind"] for e in events]
    # Streamed requests: each model turn's deltas, then the tool call and its result.
    assert kinds.count("function_tool_call") == 2 and kinds.count("function_tool_result") == 2
    calls_made = [e["part"]["tool_name"] for e in events if e["event_kind"] == "function_tool_call"]
    assert calls_made == ["lookup", "add"]
    text = "".join(
        e["delta"].get("content_delta", "") for e in events if e["event_kind"] == "part_delta"
    ) + "".join(
        e["part"].get("content", "")
        for e in events
        if e["event_kind"] == "part_start" and e["part"]["part_kind"] == "text"
    )
    assert "found widget a-1, sum 5" in text
    # The replayed body wrote nothing twice, nor handed the user's handler any event again.
    assert handled == kinds
    assert model.requests == 3


def test_outside_a_workflow_the_agent_runs_as_without_it() -> None:
    model, calls = Counted(), []
    result = run_apart(agent_of(model, calls).run("where is a-1?"))
    assert result.output == "found widget a-1, sum 5"
    assert (model.requests, calls) == (3, ["lookup a-1", "add 2 3"])


def test_a_renamed_agent_is_refused_on_replay_not_asked_again(durable: Durable) -> None:
    model, calls = Counted(), []
    agents = [agent_of(model, calls, "support"), agent_of(model, calls, "helpdesk")]
    attempts: list[int] = []

    @durable.workflow(max_attempts=2, retry_backoff=0)
    async def renamed(question: str) -> str:
        agent = agents[len(attempts)]
        attempts.append(1)
        result = await agent.run(question)
        if len(attempts) == 1:
            raise ConnectionError("dropped")
        return result.output

    with eager_workflows(durable) as kit:
        handle = renamed.apply_async(("where is a-1?",), run_id="agent-2")
        kit.sweep()
        with pytest.raises(WorkflowFailed) as failed:
            handle.get(timeout=30)
    assert "NonDeterminismError" in failed.value.error_type
    assert "support__model.request" in failed.value.error_message
    assert model.requests == 3  # the renamed agent's first request was refused, not made


def test_unknown_step_options_are_named() -> None:
    with pytest.raises(TypeError, match=r"model_step=.*'retries' is not an option"):
        CeleryDurability(model_step={"retries": 3})
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        CeleryDurability(tool_step={"max_attempts": 0})


def test_the_step_names_are_pinned() -> None:
    """Every kind of operation Pydantic AI names, as its compatibility test lists them:
    a change here orphans the steps of runs recorded before it."""
    from pydantic_ai.durable_exec import (
        CapabilityOperationId,
        EventStreamHandlerId,
        JournalOperationNamer,
        ModelCancelSuspendedResponseId,
        ModelCompactMessagesId,
        ModelCountTokensId,
        ModelRequestId,
        ToolsetCallToolId,
        ToolsetGetInstructionsId,
        ToolsetGetToolsId,
        ToolsetValidateToolArgumentsId,
    )

    from celery_durable.contrib.pydantic_ai import CeleryOperationBackend
    from celery_durable.contrib.pydantic_ai.durability import MODEL_STEP

    backend = CeleryOperationBackend(agent_name="compat", config=_config(MODEL_STEP))
    namer: Any = backend._namer  # noqa: SLF001 - the namer the backend names steps with
    assert isinstance(namer, JournalOperationNamer)
    ids_and_labels = [
        (ModelRequestId("default", streaming=False, model_name="m"), None),
        (ModelRequestId("default", streaming=True, model_name="m"), None),
        (ModelRequestId("registered", streaming=False, model_name="m"), None),
        (ModelCountTokensId("default", model_name="m"), None),
        (ModelCompactMessagesId("default", model_name="m"), None),
        (ModelCancelSuspendedResponseId("default", model_name="m"), None),
        (EventStreamHandlerId(), None),
        (CapabilityOperationId("compat", operation="operation"), None),
        (ToolsetGetToolsId("mcp", toolset_id="mcp"), None),
        (ToolsetGetInstructionsId("mcp"), None),
        (ToolsetCallToolId("mcp", toolset_id="mcp"), "mcp_tool"),
        (ToolsetGetToolsId("dynamic", toolset_id="dynamic"), None),
        (ToolsetCallToolId("dynamic", toolset_id="dynamic"), "dynamic_tool"),
        (ToolsetValidateToolArgumentsId("function", toolset_id="functions"), "function_tool"),
        (ToolsetCallToolId("function", toolset_id="functions"), "function_tool"),
    ]
    names = [namer.invocation_name(i, label=label).operation_name for i, label in ids_and_labels]
    assert names == [
        "compat__model.request",
        "compat__model.request_stream",
        "compat__model.request.registered",
        "compat__model.count_tokens",
        "compat__model.compact_messages",
        "compat__model.cancel_suspended_response",
        "compat__event_stream_handler",
        "compat__capability__compat.operation",
        "compat__mcp_server__mcp.get_tools",
        "compat__mcp_server__mcp.get_instructions",
        "compat__mcp_server__mcp.call_tool",
        "compat__dynamic_toolset__dynamic.get_tools",
        "compat__dynamic_toolset__dynamic.call_tool:dynamic_tool",
        "compat__function_toolset__functions.validate_args",
        "compat__function_toolset__functions.call_tool:function_tool",
    ]


def _config(options: dict[str, Any]) -> Any:
    from pydantic_ai.durable_exec import RoleBasedOperationConfig

    return RoleBasedOperationConfig(model=options, event=options, capability=options, tool=options)


def test_an_mcp_server_s_tools_are_steps_too(durable: Durable) -> None:
    from fastmcp import FastMCP
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.test import TestModel

    forecasts: list[str] = []
    server = FastMCP("weather")

    @server.tool
    def forecast(city: str) -> str:
        forecasts.append(city)
        return f"sunny in {city}"

    agent = Agent(
        TestModel(),
        name="weather",
        toolsets=[MCPToolset(server, id="weather")],
        capabilities=[CeleryDurability()],
    )
    attempts: list[int] = []

    @durable.workflow(max_attempts=2, retry_backoff=0)
    async def outlook(question: str) -> str:
        result = await agent.run(question)
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("dropped after the agent ran")
        return result.output

    with eager_workflows(durable) as kit:
        handle = outlook.apply_async(("the weather?",), run_id="agent-mcp")
        kit.sweep()
        assert "sunny in" in handle.get(timeout=30)
    assert len(forecasts) == 1  # the server's tool ran once, not again on replay
    names = [s.name for s in steps_of(durable, "agent-mcp")]
    assert "weather__mcp_server__weather.get_tools" in names
    assert names.count("weather__mcp_server__weather.call_tool") == 1
