"""A FastAPI service that starts a workflow, awaits its result and signals it, on the async
client (``adelay``, ``aget``, ``asignal``): no call blocks the service's event loop, so one
process serves every request while others wait for their runs.

It needs FastAPI and an ASGI server, which celery_durable does not install
(``pip install fastapi uvicorn``), and the store and broker of your workers. Save it as
``fastapi_app.py``, then::

    createdb -h 127.0.0.1 -U postgres shop
    export CELERY_DURABLE_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1/shop
    celery -A fastapi_app durable migrate
    celery -A fastapi_app worker                  # in one terminal
    uvicorn fastapi_app:api --port 8000           # in another

    curl -X POST localhost:8000/orders/42         # {"run_id": "..."}
    curl "localhost:8000/runs/<run_id>/result?timeout=60"      # waits for the approval
    curl -X POST localhost:8000/runs/<run_id>/approval \\
         -H "content-type: application/json" -d '{"by": "alice"}'

``CELERY_BROKER_URL`` names the broker (Redis on 127.0.0.1 by default).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

import celery_durable as cd
from celery_durable import Durable, WorkflowCancelled, WorkflowFailed, WorkflowNotFound

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


@api.exception_handler(WorkflowNotFound)
async def not_found(request: object, exc: WorkflowNotFound) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


# --8<-- [end:api]
