"""A FastAPI service that starts a workflow, awaits its result and signals it, on the async
client (``adelay``, ``aget``, ``asignal``): no call blocks the service's event loop, so one
process serves every request while others wait for their runs. And a durable support
agent (Pydantic AI): started by an endpoint, its tokens and tool calls streamed to the
browser by Server-Sent Events, a refund it wants made waiting for a person's approval.

It needs FastAPI, an ASGI server and Pydantic AI, which celery_durable does not install
(``pip install fastapi uvicorn celery-durable[pydantic-ai]``), and the store and broker
of your workers. The agent runs on Pydantic AI's offline ``TestModel`` unless
``SUPPORT_MODEL`` names a real one (``SUPPORT_MODEL=openai:gpt-5`` with
``OPENAI_API_KEY`` set, on the workers). Save it as ``fastapi_app.py``, then::

    createdb -h 127.0.0.1 -U postgres shop
    export CELERY_DURABLE_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1/shop
    celery -A fastapi_app durable migrate
    celery -A fastapi_app worker                  # in one terminal
    uvicorn fastapi_app:api --port 8000           # in another

    curl -X POST localhost:8000/orders/42         # {"run_id": "..."}
    curl "localhost:8000/runs/<run_id>/result?timeout=60"      # waits for the approval
    curl -X POST localhost:8000/runs/<run_id>/approval \\
         -H "content-type: application/json" -d '{"by": "alice"}'

    curl -X POST localhost:8000/support -H "content-type: application/json" \\
         -d '{"question": "Where is order 42? Refund it."}'      # {"run_id": "..."}
    curl -N localhost:8000/runs/<run_id>/events    # tokens, tool calls, then the approval asked
    curl -X POST localhost:8000/approvals -H "content-type: application/json" \\
         -d '{"token": "<from the event>", "calls": ["<its call ids>"], "approve": true}'

``CELERY_BROKER_URL`` names the broker (Redis on 127.0.0.1 by default).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied

import celery_durable as cd
from celery_durable import Durable, WorkflowCancelled, WorkflowFailed, WorkflowNotFound
from celery_durable.contrib.pydantic_ai import CeleryDurability, aresolve_token

app = Celery("fastapi_app", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
durable = Durable(app)  # the store: CELERY_DURABLE_DATABASE_URL (or durable_database_url)


# --8<-- [start:workflow]
@durable.step
def reserve(order_id: int) -> dict:
    return {"order": order_id, "amount": 1999}


@durable.step
def charge(order_id: int, amount: int, approved_by: str) -> str:
    return f"receipt-{order_id}-{amount}-{approved_by}"


@durable.workflow
def checkout(order_id: int) -> dict:
    item = reserve(order_id)
    approval = cd.wait_for_signal("approval", timeout=3600)  # sent by POST .../approval
    if approval is None:
        return {"status": "expired"}
    return {"status": "paid", "receipt": charge(order_id, item["amount"], approval["by"])}


# --8<-- [end:workflow]


# --8<-- [start:agent]
async def ask_a_person(ctx: object, requests: DeferredToolRequests, token: str) -> None:
    """A tool needs approval: tell the browser (it reads the run's events) and wait."""
    calls = [
        {"id": call.tool_call_id, "tool": call.tool_name, "args": call.args_as_dict()}
        for call in requests.approvals
    ]
    cd.write_stream("events", {"approval_needed": {"token": token, "calls": calls}})


MODEL = os.environ.get("SUPPORT_MODEL", "test")  # "openai:gpt-5": a real model
support_agent = Agent(
    TestModel(call_tools="all") if MODEL == "test" else MODEL,
    name="support",  # in every step's name: keep it stable across deploys
    instructions="You help customers with their orders.",
    capabilities=[
        CeleryDurability(stream="events"),  # each request and tool call a step
        HandleDeferredToolCalls(handler=ask_a_person, name="approve_refund"),
    ],
)


@support_agent.tool_plain
def order_status(order_id: int) -> str:
    return f"order {order_id} shipped yesterday"


@support_agent.tool_plain(requires_approval=True)
def refund(order_id: int, amount: int) -> str:
    return f"refunded {amount} on order {order_id}"


@durable.workflow
async def support(question: str) -> str:
    result = await support_agent.run(question)  # a worker that dies resumes it
    return result.output


# --8<-- [end:agent]

# --8<-- [start:api]
api = FastAPI()


class Approval(BaseModel):
    by: str


@api.post("/orders/{order_id}")
async def start_checkout(order_id: int) -> dict:
    handle = await checkout.adelay(order_id)  # stored, then published, off the loop
    return {"run_id": handle.id}


@api.get("/runs/{run_id}/result")
async def result(run_id: str, timeout: float = 30.0) -> JSONResponse:
    handle = await durable.aget_handle(run_id)
    try:
        value = await handle.aget(timeout=timeout)  # woken by Postgres's NOTIFY
    except CeleryTimeoutError:
        status = await handle.astatus()
        return JSONResponse({"status": str(status)}, status_code=202)  # still going
    except (WorkflowFailed, WorkflowCancelled) as ended:
        return JSONResponse({"status": "ENDED", "error": str(ended)}, status_code=409)
    return JSONResponse({"status": "SUCCEEDED", "result": value})


@api.post("/runs/{run_id}/approval")
async def approve(run_id: str, approval: Approval) -> dict:
    handle = await durable.aget_handle(run_id)
    stored = await handle.asignal("approval", approval.model_dump())
    return {"stored": stored}


class Question(BaseModel):
    question: str


class Decision(BaseModel):
    token: str  # from the run's "approval_needed" event, with the calls' ids
    calls: list[str]
    approve: bool
    reason: str = "a person said no"


RESULTS: TypeAdapter[DeferredToolResults] = TypeAdapter(DeferredToolResults)


@api.post("/support")
async def ask_support(question: Question) -> dict:
    handle = await support.adelay(question.question)
    return {"run_id": handle.id}


@api.get("/runs/{run_id}/events")
async def events(run_id: str, start: int = 0) -> StreamingResponse:
    handle = await durable.aget_handle(run_id)

    async def sent() -> AsyncIterator[str]:  # Server-Sent Events, ids the offsets
        async for offset, event in handle.aread_stream("events", start, with_offsets=True):
            yield f"id: {offset}\ndata: {json.dumps(event)}\n\n"

    return StreamingResponse(sent(), media_type="text/event-stream")


@api.post("/approvals")
async def decide(decision: Decision) -> dict:
    answer = True if decision.approve else ToolDenied(decision.reason)
    results = DeferredToolResults(approvals={call: answer for call in decision.calls})
    await aresolve_token(durable, decision.token, RESULTS.dump_python(results, mode="json"))
    return {"decided": decision.calls}


@api.exception_handler(WorkflowNotFound)
async def not_found(request: object, exc: WorkflowNotFound) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


# --8<-- [end:api]
