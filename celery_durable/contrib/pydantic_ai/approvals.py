"""A human in the loop: an agent run that waits for an answer from outside (a tool that
needs approval, with Pydantic AI's ``HandleDeferredToolCalls`` and a handler that takes a
resume token) suspends the workflow run on a signal, WAITING and holding no worker, until
``resolve_token`` (from an endpoint, a Slack action, the CLI) sends the answer.

The token names the run and its wait: ``cd-pai:<run id>:<signal>``. Each part of a wait is
recorded: the handler's answer (a step), the payload (the signal's step), so a replay
neither asks again nor waits again.

Example::

    async def ask_a_person(ctx, requests, token):
        await notify_reviewers(token, requests)       # hand the token on; None: wait
        return None

    agent = Agent(model, name="support", capabilities=[
        CeleryDurability(),
        HandleDeferredToolCalls(handler=ask_a_person, name="approve_refund"),
    ])

    # later, elsewhere (the reviewers' endpoint):
    resolve_token(durable, token, {"approvals": {"call-1": True}})
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from pydantic import JsonValue
from pydantic_ai.durable_exec import durable_unit_scope
from pydantic_ai.external_events import ExternalEventError, ExternalEventWaiter

from celery_durable.body.context import WorkflowContext
from celery_durable.body.step import Step, StepOptions
from celery_durable.errors import InvalidArgument
from celery_durable.waits.suspend import wait_for_signal

TOKEN_PREFIX = "cd-pai:"
SIGNAL_PREFIX = "pydantic_ai."  # a wait's signal: pydantic_ai.<wait name>.<its count in the run>
WAITS = "pydantic_ai.waits"
# What a wait's signal returns when its timeout passed: never a payload (not stored).
TIMED_OUT = object()
# The failure a token is resolved with, as its payload: {"pydantic_ai_failure": reason}.
FAILURE = "pydantic_ai_failure"


class SignalWaiter(ExternalEventWaiter):
    """Waits of one agent run: each a recorded ask, then a signal of its own name."""

    def __init__(self, agent_name: str) -> None:
        self.agent_name = agent_name

    async def wait(
        self,
        name: str,
        *,
        ask: Callable[[str], Awaitable[JsonValue]],
        timeout: timedelta | None,
    ) -> JsonValue:
        ctx = WorkflowContext.current()
        assert ctx is not None  # installed in a workflow body only (CeleryDurability.wrap_run)
        counts: dict[str, int] = ctx.wing_state(WAITS, dict)
        count = counts.get(name, 0)
        counts[name] = count + 1
        signal = f"{SIGNAL_PREFIX}{name}.{count}"
        token = f"{TOKEN_PREFIX}{ctx.run_id}:{signal}"

        async def asked(token: str) -> JsonValue:
            with durable_unit_scope():
                return await ask(token)

        step_name = f"{self.agent_name}__external_event.{name}.ask"
        answer = await Step(asked, name=step_name, options=StepOptions())(token)  # type: ignore[misc]
        if answer is not None:
            return answer  # type: ignore[no-any-return]
        seconds = None if timeout is None else timeout.total_seconds()
        payload = await wait_for_signal(signal, seconds, default=TIMED_OUT)
        if payload is TIMED_OUT:
            raise ExternalEventError(f"no answer to {name!r} within {seconds}s")
        if isinstance(payload, dict) and set(payload) == {FAILURE}:
            raise ExternalEventError(str(payload[FAILURE]))
        return payload  # type: ignore[no-any-return]


def run_and_signal(token: str) -> tuple[str, str]:
    """The run id and the signal name a token names; InvalidArgument naming it if it is
    not one of ours."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise InvalidArgument(f"resolve_token(token): {token!r} is not a celery_durable token")
    named = token.removeprefix(TOKEN_PREFIX)
    split = named.rfind(":" + SIGNAL_PREFIX)
    if split <= 0:
        raise InvalidArgument(f"resolve_token(token): {token!r} is not a celery_durable token")
    return named[:split], named[split + 1 :]


def resolve_token(durable: Any, token: str, payload: JsonValue) -> None:
    """Answer the wait ``token`` names with ``payload`` (JSON; for
    ``HandleDeferredToolCalls``, the JSON form of ``DeferredToolResults``): the run is
    woken and goes on. From any process; a second answer waits for no one (the run takes
    the first)."""
    run_id, signal = run_and_signal(token)
    durable.get_handle(run_id).signal(signal, payload)


def fail_token(durable: Any, token: str, reason: str) -> None:
    """End the wait ``token`` names without an answer: Pydantic AI's
    ``ExternalEventError(reason)`` in the run (for deferred tool calls: each pending
    approval denied, each external call failed, with ``reason`` told to the model)."""
    run_id, signal = run_and_signal(token)
    durable.get_handle(run_id).signal(signal, {FAILURE: reason})


async def aresolve_token(durable: Any, token: str, payload: JsonValue) -> None:
    """``resolve_token``, awaited (from an async endpoint): the signal is stored off the
    event loop."""
    run_id, signal = run_and_signal(token)
    handle = await durable.aget_handle(run_id)
    await handle.asignal(signal, payload)


async def afail_token(durable: Any, token: str, reason: str) -> None:
    """``fail_token``, awaited."""
    run_id, signal = run_and_signal(token)
    handle = await durable.aget_handle(run_id)
    await handle.asignal(signal, {FAILURE: reason})
