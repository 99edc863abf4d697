"""Pydantic AI agents as durable workflows: ``CeleryDurability``, a Pydantic AI durability
capability, runs each model request and each tool call of an agent run in an async
workflow body as a durable step, named by Pydantic AI's journal namer. A worker that dies
mid-run replays the body: the recorded requests and calls return what they returned, and
the run goes on from the first one not recorded, paying for nothing twice.

Built on ``pydantic_ai.durable_exec``'s public engine surface: the capability declares the
engine (``ENGINE``) and hands Pydantic AI a ``CallableOperationBackend`` whose ``execute``
runs the operation's callback as a step.

Example::

    agent = Agent(model, name="support", capabilities=[CeleryDurability()])

    @durable.workflow
    async def answer(question: str) -> str:
        result = await agent.run(question)      # each request and tool call: a step
        return result.output
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    JournalCallableOperationBackend,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    conversation_id_from_run_id,
)
from pydantic_ai.external_events import external_event_scope
from pydantic_ai.models import Model
from pydantic_ai.tools import AgentDepsT, RunContext

from celery_durable.body.context import WorkflowContext
from celery_durable.body.event_loop import IN_ASYNC_STEP, Interrupted, in_async_body
from celery_durable.body.step import Step, StepOptions
from celery_durable.contrib.pydantic_ai.approvals import SignalWaiter
from celery_durable.contrib.pydantic_ai.events import stream_writer
from celery_durable.core import validate
from celery_durable.errors import (
    ContinuedAsNew,
    LeaseLost,
    NonDeterminismError,
    StoreUnavailable,
    Suspended,
    WorkflowCancelled,
)
from celery_durable.waits.suspend import sleep

# A step's options, as ``@durable.step(...)`` takes them (max_attempts, backoff, limiter...).
StepConfig = dict[str, Any]

# The engine as Pydantic AI sees it. Steps run in the body's own process, so an MCP
# server's session is held for the run; tools run one at a time, since a step takes its
# index when it is called and concurrent calls would take them in scheduling order.
ENGINE = DurabilityEngineSpec(
    engine_name="celery_durable",
    durable_unit_noun="step",
    durable_unit_plural="steps",
    durable_container_noun="workflow",
    codec=JSON_CODEC,  # a step's result is JSON
    wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
    toolset_lifecycles={
        "function": "enter-always",
        "mcp": "enter-in-durable-unit",
        "dynamic": "enter-never",
    },
    unsupported_runtime_toolset_kinds=frozenset(),
    sequential_tools_in_durable_context=True,
    tool_config_key="celery_durable",  # metadata={"celery_durable": {...step options} | False}
    cancellation_error_types=(WorkflowCancelled, Interrupted),
    # What ends a body without failing it: a wait that suspends the run, a lost lease,
    # an unreachable store, continue_as_new. They pass through the agent untouched.
    control_flow_error_types=(Suspended, LeaseLost, StoreUnavailable, ContinuedAsNew),
    nondeterminism_error_types=(NonDeterminismError,),
)

# Model requests retry in-process as a step does (a provider's 5xx, a timeout); a tool
# call runs once unless its metadata says otherwise: a tool's side effect is the user's.
MODEL_STEP: StepConfig = {"max_attempts": 3, "backoff": 1.0}
TOOL_STEP: StepConfig = {"max_attempts": 1}
# An event's handler: recorded with the run's next write, not a commit of its own.
EVENT_STEP: StepConfig = {"max_attempts": 1, "commit": "deferred"}
WING = "pydantic_ai"


class CeleryOperationBackend(JournalCallableOperationBackend[StepConfig]):
    """Runs each operation of an agent run as a step of the workflow it runs in."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: StepConfig,
    ) -> object:
        async def operation(call: dict[str, Any]) -> object:
            return await body()

        step = Step(operation, name=name, options=StepOptions(**config))
        return await step(step_input(operation_id, cache_key))  # type: ignore[misc]


def step_input(operation_id: DurableOperationId, cache_key: tuple[object, ...]) -> dict[str, Any]:
    """What a step records as its input, checked again on replay: the tool call's id for a
    tool call (taken from the recorded model response, so the same on replay), nothing for
    the rest. Never the messages: their timestamps are taken anew on each replay."""
    if isinstance(operation_id, ToolsetCallToolId) and len(cache_key) > 2:
        call_id = getattr(cache_key[2], "tool_call_id", None)
        if isinstance(call_id, str):
            return {"tool_call_id": call_id}
    return {}


class CeleryDurability(BaseDurabilityCapability[AgentDepsT]):
    """Make an agent durable when it runs in an ``async def`` workflow body: each model
    request, tool call (function tools and MCP servers) and event handled becomes a step,
    named ``<agent>__model.request``, ``<agent>__function_toolset__<agent>.call_tool:<tool>``
    and so on (Pydantic AI's journal names: keep the agent's ``name`` stable across
    deploys). Outside a workflow, or inside a step, the agent runs as it would without it.

    ``model_step``, ``tool_step``, ``mcp_step`` and ``event_step``: the options of those
    steps, as ``@durable.step(...)`` takes them (``max_attempts``, ``backoff``,
    ``limiter=durable.limiter(...)``...); a tool's own metadata
    ``{"celery_durable": {...}}`` overrides them for it, ``{"celery_durable": False}`` runs
    it outside any step. ``models``: further models a run may switch to, by id.
    ``stream``: the key of the run's stream the agent's events are written to (model
    deltas, tool calls and results, as Pydantic AI's JSON); ``event_stream_handler`` is
    given them too."""

    engine_spec = ENGINE

    def __init__(
        self,
        *,
        name: str | None = None,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        stream: str | None = None,
        model_step: StepConfig | None = None,
        tool_step: StepConfig | None = None,
        mcp_step: StepConfig | None = None,
        event_step: StepConfig | None = None,
    ) -> None:
        if stream is not None:
            validate.check_text(
                stream, "CeleryDurability(stream)", max_chars=255, allow_empty=False
            )
            event_stream_handler = stream_writer(stream, event_stream_handler)
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        self.stream = stream
        self.model_step = {**MODEL_STEP, **(model_step or {})}
        self.tool_step = {**TOOL_STEP, **(tool_step or {})}
        self.mcp_step = {**TOOL_STEP, **(mcp_step or {})}
        self.event_step = {**EVENT_STEP, **(event_step or {})}
        for role, options in (
            ("model_step", self.model_step),
            ("tool_step", self.tool_step),
            ("mcp_step", self.mcp_step),
            ("event_step", self.event_step),
        ):
            _check_options(role, options)

    @property
    def in_durable_context(self) -> bool:
        """In an async workflow body, not in a step: there each operation is a step."""
        ctx = WorkflowContext.current()
        return ctx is not None and not ctx.in_step and not IN_ASYNC_STEP.get() and in_async_body()

    @property
    def in_durable_unit(self) -> bool:
        ctx = WorkflowContext.current()
        in_step = ctx is not None and (ctx.in_step or IN_ASYNC_STEP.get())
        return in_step or super().in_durable_unit

    def get_default_run_id(self) -> str | None:
        """The same on every replay: the workflow run's id and where in its body the agent
        run began (with a count, for runs begun at the same place)."""
        ctx = WorkflowContext.current()
        if ctx is None or not self.in_durable_context:
            return None
        place = ctx.next_index
        begun: dict[int, int] = ctx.wing_state(WING, dict)
        count = begun.get(place, 0)
        begun[place] = count + 1
        return f"{ctx.run_id}:{place}" + (f".{count}" if count else "")

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler) -> Any:
        """In a workflow, a wait for an answer from outside (``HandleDeferredToolCalls``
        with a handler that takes a token) suspends the run on a signal (``approvals``)."""
        if not self.in_durable_context:
            return await super().wrap_run(ctx, handler=handler)
        with external_event_scope(SignalWaiter(self.name)):
            return await super().wrap_run(ctx, handler=handler)

    async def durable_sleep(self, seconds: float) -> None:
        """The agent's waits (between polls of a background response) suspend the run
        on a durable timer: no worker is held, and a recovered run doesn't wait again."""
        if seconds > 0:
            await sleep(seconds)

    def get_durable_operation_backend(self) -> DurableOperationBackend[StepConfig]:
        def tool_config(
            operation_id: DurableOperationId, tool: object | None, tool_name: str
        ) -> StepConfig | Literal[False]:
            kind = getattr(operation_id, "toolset_kind", "function")
            base = self.mcp_step if kind == "mcp" else self.tool_step
            resolved = self._build_resolve_tool_config(base)(tool, tool_name)  # type: ignore[arg-type]
            if resolved is False:
                return False
            return {**base, **dict(resolved)}

        return CeleryOperationBackend(
            agent_name=self.name,
            default_model_id=self._default_model_id,
            config=RoleBasedOperationConfig(
                model=self.model_step,
                event=self.event_step,
                capability=self.tool_step,
                tool=self.tool_step,
                resolve_tool=tool_config,
            ),
        )


def _check_options(role: str, options: StepConfig) -> None:
    """Refuse a step option ``@durable.step`` doesn't take, naming the argument."""
    unknown = sorted(set(options) - set(StepOptions.__dataclass_fields__))
    if unknown:
        raise TypeError(
            f"CeleryDurability({role}=...): {', '.join(map(repr, unknown))} is not an option "
            f"of @durable.step (it takes {', '.join(sorted(StepOptions.__dataclass_fields__))})"
        )
    StepOptions(**options).check(f"CeleryDurability {role}")
