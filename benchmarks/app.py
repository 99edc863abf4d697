"""The app every benchmark worker runs: plain Celery no-op tasks and durable workflows.

Settings come from the environment, set by the driver (``benchmarks.cli``) before it imports
this module and before it starts workers:

- ``BENCH_BROKER_URL``, ``BENCH_RESULT_BACKEND``, ``BENCH_QUEUE`` (unique per run);
- ``BENCH_REDIS_URL`` for the timestamps the steps write;
- ``CELERY_DURABLE_*`` for the durable store (database URL, table prefix, namespace, ...).

Timestamps are ``time.time()`` pushed onto Redis lists: workers and the driver share the
machine's clock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any

import redis
from celery import Celery
from celery.signals import before_task_publish, task_prerun, worker_ready

import celery_durable as cd
from celery_durable import Durable, WorkflowContext

BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/0")
RESULT_BACKEND = os.environ.get("BENCH_RESULT_BACKEND", "redis://127.0.0.1:6379/1")
QUEUE = os.environ.get("BENCH_QUEUE", "celery_durable.bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", BROKER_URL)

app = Celery("benchmarks", broker=BROKER_URL, backend=RESULT_BACKEND)
app.conf.update(
    task_default_queue=QUEUE,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    result_expires=3600,
)
durable = Durable(app)  # every setting from CELERY_DURABLE_* env vars

_redis = redis.Redis.from_url(REDIS_URL, decode_responses=True)
logger = logging.getLogger("benchmarks.app")

# ``python -m benchmarks.bigmap`` counts every message its processes publish (a Redis INCR
# each, so only when asked: the other figures would pay for it).
PUBLISHED_KEY = os.environ.get("BENCH_COUNT_PUBLISHED")
if PUBLISHED_KEY:

    @before_task_publish.connect(weak=False)
    def _count_published(**_: Any) -> None:
        _redis.incr(str(PUBLISHED_KEY))


def mark(key: str, label: str) -> float:
    """Push the current wall-clock time onto the Redis list ``<key>:<label>``."""
    now = time.time()
    _redis.rpush(f"{key}:{label}", repr(now))
    return now


# -- plain Celery ---------------------------------------------------------------------------


@app.task(name="benchmarks.noop")
def noop(_previous: Any = None) -> None:
    """A no-op task; its result (None) goes to the Redis result backend. Chains pass it on."""
    return None


def block_on(flag: str, timeout: float = 60.0) -> None:
    """Count a start under ``<flag>:started``, wait (bounded) until the key ``flag`` exists,
    then count a finish under ``<flag>:done``: an item that runs until the driver says so."""
    _redis.incr(f"{flag}:started")
    deadline = time.monotonic() + timeout
    while not _redis.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.02)
    _redis.incr(f"{flag}:done")


# The realistic-work figure: a step waits IO_WAIT_S (a call to another service, say), and
# the plain task it is compared with waits as long as the workflow's three steps together.
IO_WAIT_S = 0.005


@app.task(name="benchmarks.io_task")
def io_task() -> None:
    """15 ms of I/O (three waits of ``IO_WAIT_S``) in one plain task: three waits, as the
    workflows' three steps (each ``sleep`` overshoots by ~0.1 ms; one 15 ms sleep would
    put 0.3 ms of the workflows' own waiting into their overhead)."""
    for _ in range(3):
        time.sleep(IO_WAIT_S)


@app.task(name="benchmarks.blocker")
def blocker(flag: str, i: int) -> int:
    """A chord item of the SIGKILL comparison."""
    block_on(flag)
    return i


@app.task(name="benchmarks.chord_done")
def chord_done(results: Any, flag: str) -> None:
    """The chord callback of the SIGKILL comparisons: sets ``<flag>:callback``, counts its
    runs under ``<flag>:callbacks`` and pushes the results it got onto ``<flag>:results``
    (JSON, one entry a run)."""
    _redis.set(f"{flag}:callback", "1", ex=3600)
    _redis.incr(f"{flag}:callbacks")
    _redis.rpush(f"{flag}:results", json.dumps(results))


# -- durable --------------------------------------------------------------------------------


@durable.step(name="benchmarks.noop_step")
def noop_step(i: int) -> int:
    return i


@durable.step(name="benchmarks.stamp")
def stamp(key: str) -> float:
    """A step that records when it started (``<key>:stamp``)."""
    return mark(key, "stamp")


@durable.workflow(name="benchmarks.three_steps")
def three_steps() -> int:
    """Three no-op steps: the throughput and latency workflow."""
    return sum(noop_step(i) for i in range(3))


@durable.step(name="benchmarks.io_step")
def io_step(i: int) -> int:
    time.sleep(IO_WAIT_S)
    return i


@durable.workflow(name="benchmarks.three_io")
def three_io() -> int:
    """Three steps that each wait ``IO_WAIT_S``: the realistic-work figure."""
    return sum(io_step(i) for i in range(3))


@durable.step(name="benchmarks.noop_deferred", commit="deferred")
def noop_deferred(i: int) -> int:
    return i


@durable.workflow(name="benchmarks.three_deferred")
def three_deferred() -> int:
    """Three deferred no-op steps: their records ride on the settle."""
    return sum(noop_deferred(i) for i in range(3))


@durable.step(name="benchmarks.io_deferred", commit="deferred")
def io_deferred(i: int) -> int:
    time.sleep(IO_WAIT_S)
    return i


@durable.workflow(name="benchmarks.three_io_deferred")
def three_io_deferred() -> int:
    """``three_io`` with deferred steps: the realistic-work figure of deferred steps."""
    return sum(io_deferred(i) for i in range(3))


@durable.workflow(name="benchmarks.k_steps")
def k_steps(k: int) -> int:
    """``k`` no-op steps: the commit-count workflow (3 vs 10 steps)."""
    return sum(noop_step(i) for i in range(k))


@durable.workflow(name="benchmarks.fan_map")
def fan_map(n: int) -> int:
    """``cd.map`` of ``n`` no-op items: the fan-out compared with a chord."""
    return len(cd.map(noop_step, range(n)))


@durable.workflow(name="benchmarks.batched_map")
def batched_map(n: int, size: int | str) -> int:
    """``cd.map`` of ``n`` no-op items, ``size`` to a task (``"auto"`` too): the batched
    fan-out compared with a chord and a chord over ``chunks``."""
    return len(cd.map(noop_step, range(n), batch_size=size))


@durable.step(name="benchmarks.block_step")
def block_step(flag: str, i: int) -> int:
    """A map item of the SIGKILL comparison."""
    block_on(flag)
    return i


@durable.workflow(name="benchmarks.block_flow")
def block_flow(i: int, flag: str) -> int:
    """One step that blocks on ``flag``: a header member of the chord SIGKILL comparison,
    ``chord([block_flow.s(i, flag) for i in range(10)], chord_done.s(flag))``."""
    return block_step(flag, i)


@durable.workflow(name="benchmarks.block_map")
def block_map(flag: str, n: int) -> int:
    """``cd.map`` of ``n`` items that block on ``flag``: the SIGKILL comparison."""
    return len(cd.map(block_step, [flag] * n, range(n)))


@durable.workflow(name="benchmarks.replay", max_attempts=2, retry_backoff=0.0)
def replay(key: str, k: int) -> float:
    """``k`` no-op steps, then fail on attempt 1; attempt 2 replays them and stamps.

    Marks: ``prerun`` (task_prerun, each attempt, just before the claim), ``body`` (attempt 2
    body start, after claim and history load), ``first_done`` (attempt 1 after its k steps),
    ``stamp`` (step k+1 starts).
    """
    ctx = WorkflowContext.current()
    assert ctx is not None
    if ctx.attempt > 1:
        mark(key, "body")
    for i in range(k):
        noop_step(i)
    if ctx.attempt == 1:
        mark(key, "first_done")
        raise RuntimeError("attempt 1 fails on purpose so that attempt 2 replays its steps")
    return stamp(key)


@durable.workflow(name="benchmarks.signalled")
def signalled(key: str) -> float:
    """Wait for signal ``go``, then run the stamp step."""
    cd.wait_for_signal("go")
    return stamp(key)


# -- flow control (issue 23): the limiter figures of ``benchmarks/limits.py`` --------------

# Ample: never full in a batch, so every call takes a slot at once (the limiter's own cost).
ample = durable.limiter("benchmarks.ample", concurrency=10000)
ample_runs = durable.limiter("benchmarks.ample_runs", concurrency=10000)
# A backlog: runs wait for one of 2 slots, handed on as each frees.
backlog_runs = durable.limiter("benchmarks.backlog_runs", concurrency=2)
backlog_slots = durable.limiter("benchmarks.backlog_steps", concurrency=2)
# Rate accuracy: tokens only, no cap on concurrency.
RATE_PER_S = 20.0
rated = durable.limiter("benchmarks.rated", rate=f"{RATE_PER_S:g}/s")


@durable.step(name="benchmarks.noop_limited", limiter=ample)
def noop_limited(i: int) -> int:
    return i


@durable.workflow(name="benchmarks.three_limited_steps")
def three_limited_steps() -> int:
    """``three_steps`` whose steps each take a slot of the ample limiter first."""
    return sum(noop_limited(i) for i in range(3))


@durable.workflow(name="benchmarks.three_steps_limited_run", limiter=ample_runs)
def three_steps_limited_run() -> int:
    """``three_steps`` whose run takes a slot of the ample run limiter before its body."""
    return sum(noop_step(i) for i in range(3))


@durable.workflow(name="benchmarks.backlog_run", limiter=backlog_runs)
def backlog_run() -> int:
    """Three no-op steps in a run that needs one of 2 slots: the run backlog."""
    return sum(noop_step(i) for i in range(3))


@durable.step(name="benchmarks.noop_backlog", limiter=backlog_slots)
def noop_backlog(i: int) -> int:
    return i


@durable.workflow(name="benchmarks.backlog_steps")
def backlog_steps() -> int:
    """Three no-op steps, each needing one of 2 slots: the step backlog."""
    return sum(noop_backlog(i) for i in range(3))


@durable.step(name="benchmarks.rate_stamp", limiter=rated)
def rate_stamp(key: str) -> float:
    """A step behind the rate limiter that records when it started (``<key>:start``)."""
    return mark(key, "start")


@durable.workflow(name="benchmarks.rate_flow")
def rate_flow(key: str) -> float:
    """One step behind ``rated``: the rate-accuracy figure."""
    return rate_stamp(key)


# -- async bodies (issue 44): the figures of ``benchmarks/aio.py`` -------------------------


@durable.step(name="benchmarks.async_noop_step")
async def async_noop_step(i: int) -> int:
    return i


@durable.workflow(name="benchmarks.async_three_steps")
async def async_three_steps() -> int:
    """``three_steps`` in an ``async def`` body: three no-op ``async def`` steps, awaited
    one after another."""
    total = 0
    for i in range(3):
        total += await async_noop_step(i)
    return total


@durable.step(name="benchmarks.async_io_step")
async def async_io_step(i: int, seconds: float) -> int:
    """``seconds`` of I/O (a call to another service, say) that leaves the loop free."""
    await asyncio.sleep(seconds)
    return i


@durable.workflow(name="benchmarks.async_gather")
async def async_gather(k: int, seconds: float) -> list[int]:
    """``k`` steps of ``seconds`` of I/O each, gathered: they wait at the same time."""
    return list(await asyncio.gather(*(async_io_step(i, seconds) for i in range(k))))


@durable.workflow(name="benchmarks.async_sequence")
async def async_sequence(k: int, seconds: float) -> list[int]:
    """The same ``k`` steps awaited one after another: ``async_gather``'s comparison."""
    return [await async_io_step(i, seconds) for i in range(k)]


@durable.step(name="benchmarks.async_numbered")
async def async_numbered(key: str, n: int) -> int:
    """Step ``n`` of ``async_five_steps``, kept in Redis as the tests' ``numbered`` step
    (the keys ``benchmarks/liveness.py`` reads): counted under ``effects:<key>:s<n>``,
    announced under ``started:<key>:s<n>``, then awaiting (bounded) while the driver holds
    ``block:<key>:s<n>``."""
    step = f"s{n}"
    _redis.incr(f"effects:{key}:{step}")
    _redis.set(f"started:{key}:{step}", "1")
    deadline = time.monotonic() + 120
    while _redis.exists(f"block:{key}:{step}") and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return n * 10


@durable.workflow(name="benchmarks.async_five_steps")
async def async_five_steps(key: str) -> list[int]:
    """The tests' ``five_steps`` in an ``async def`` body: the async liveness figure."""
    return [await async_numbered(key, n) for n in range(1, 6)]


# -- streams and updates (issue 45): the figures of ``benchmarks/talk.py`` -----------------

TICKS = "ticks"  # the stream of ``stream_ticks``
VALUES = "values"  # the stream of ``stream_writes``
UPDATE = "ping"  # the update ``ping_pong`` answers


def hundred_chars(i: int) -> str:
    """Value ``i`` of the 10,000-writes figure: 100 characters, built anew each time."""
    return f"{i:0100d}"


@durable.step(name="benchmarks.tick_step")
def tick_step(n: int, pace: float) -> int:
    """Write ``n`` values to ``ticks``, one every ``pace`` s (a model's tokens), each with
    the wall-clock time it was written (``t``) and its number (``n``)."""
    for i in range(n):
        if i:
            time.sleep(pace)
        cd.write_stream(TICKS, {"t": time.time(), "n": i})
    return n


@durable.workflow(name="benchmarks.stream_ticks")
def stream_ticks(n: int, pace: float) -> int:
    """One step writing ``n`` paced values: the stream-latency figure."""
    return tick_step(n, pace)


@durable.step(name="benchmarks.write_values_step")
def write_values_step(n: int) -> int:
    """Build ``n`` values of 100 characters and write each to ``values``."""
    for i in range(n):
        cd.write_stream(VALUES, hundred_chars(i))
    return n


@durable.step(name="benchmarks.build_values_step")
def build_values_step(n: int) -> int:
    """Build the same ``n`` values and write none: ``write_values_step``'s reference."""
    return sum(1 for i in range(n) if hundred_chars(i))


@durable.step(name="benchmarks.return_values_step")
def return_values_step(n: int) -> list[str]:
    """Build the same ``n`` values and return them: they are stored as the step's result."""
    return [hundred_chars(i) for i in range(n)]


@durable.workflow(name="benchmarks.stream_writes")
def stream_writes(n: int) -> int:
    """One step that writes ``n`` values of 100 characters to a stream."""
    return write_values_step(n)


@durable.workflow(name="benchmarks.stream_builds")
def stream_builds(n: int) -> int:
    """The same step without the writes (it returns their count)."""
    return build_values_step(n)


@durable.workflow(name="benchmarks.stream_returns")
def stream_returns(n: int) -> int:
    """The same values returned by the step (its record keeps them); the run returns the
    count, so the run's own result stays small."""
    return len(return_values_step(n))


@durable.workflow(name="benchmarks.ping_pong")
def ping_pong(k: int) -> int:
    """Answer ``k`` updates ``ping`` with their payload; how many it answered (fewer if a
    wait of 60 s gets none)."""
    for answered in range(k):
        req = cd.wait_for_update(UPDATE, timeout=60)
        if req is None:
            return answered
        req.reply(req.payload)
    return k


# -- durable agents (issue 46): the figures of ``benchmarks/agents.py`` -------------------
#
# Defined only when ``BENCH_AGENTS`` is set (``--agents-only`` sets it for its driver and
# workers): Pydantic AI (the ``pydantic-ai`` extra) is not imported by the other figures'
# workers, which would pay for its import at each start.

AGENT_REQUESTS = 20  # model requests of one agent run: K - 1 tool calls, then the answer
AGENT_BLOCK_AT = 10  # the tool call of ``agent_killed`` that holds while the driver says so

if os.environ.get("BENCH_AGENTS"):
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from celery_durable.contrib.pydantic_ai import CeleryDurability

    def tool_returns(messages: list[ModelMessage]) -> int:
        """How many tool calls of the run returned so far."""
        return sum(
            part.part_kind == "tool-return" for message in messages for part in message.parts
        )

    def next_response(messages: list[ModelMessage]) -> ModelResponse:
        """Ask for the tool (call ``i``, counted from 1) until it returned
        ``AGENT_REQUESTS - 1`` times, then answer: ``AGENT_REQUESTS`` requests a run."""
        done = tool_returns(messages)
        if done < AGENT_REQUESTS - 1:
            call = ToolCallPart("tool", {"i": done + 1}, tool_call_id=f"call-{done + 1}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(f"done after {done} tool calls")])

    def offline_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """The overhead figure's model: no I/O, no Redis, nothing but the next response."""
        return next_response(messages)

    def noop_tool(agent: Agent[None, str]) -> None:
        """The no-op tool, never a step of a durable agent (run in the body, as without
        the capability): the overhead figure times model requests only."""

        @agent.tool_plain(metadata={"celery_durable": False})
        def tool(i: int) -> int:
            return i

    durable_agent: Agent[None, str] = Agent(
        FunctionModel(offline_model),
        name="bench_durable",
        capabilities=[CeleryDurability()],
    )
    noop_tool(durable_agent)
    plain_agent: Agent[None, str] = Agent(FunctionModel(offline_model), name="bench_plain")
    noop_tool(plain_agent)

    @durable.workflow(name="benchmarks.agent_durable")
    async def agent_durable() -> str:
        """One run of the durable agent: ``AGENT_REQUESTS`` model requests, each a step."""
        return (await durable_agent.run("go")).output

    @durable.workflow(name="benchmarks.agent_plain")
    async def agent_plain() -> str:
        """The same run of the same agent without the capability: no step at all."""
        return (await plain_agent.run("go")).output

    def run_key(messages: list[ModelMessage]) -> str:
        """The driver's key of a killed run: its prompt's first word."""
        prompt = messages[0].parts[-1].content  # type: ignore[union-attr]
        return str(prompt).split()[0]

    def counted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """``offline_model``, counting each request it answers under ``<key>:requests``
        (across processes and SIGKILLs)."""
        _redis.incr(f"{run_key(messages)}:requests")
        return next_response(messages)

    killed_agent: Agent[None, str] = Agent(
        FunctionModel(counted_model),
        name="bench_killed",
        capabilities=[CeleryDurability()],
    )

    @killed_agent.tool(name="tool")  # the name the model asks for
    def hold(ctx: RunContext[None], i: int) -> int:
        """A tool call (a step, the capability's default), counted under ``<key>:tools``;
        call ``AGENT_BLOCK_AT`` announces itself (``<key>:blocked``) and holds (bounded)
        while the driver holds ``<key>:block``."""
        key = run_key(ctx.messages)
        _redis.incr(f"{key}:tools")
        if i == AGENT_BLOCK_AT:
            _redis.set(f"{key}:blocked", "1", ex=3600)
            deadline = time.monotonic() + 120
            while _redis.exists(f"{key}:block") and time.monotonic() < deadline:
                time.sleep(0.02)
        return i

    @durable.workflow(name="benchmarks.agent_killed")
    async def agent_killed(key: str) -> str:
        """A run of ``AGENT_REQUESTS`` model requests whose tool call ``AGENT_BLOCK_AT``
        holds on ``<key>:block``: the worker running it is SIGKILLed there."""
        return (await killed_agent.run(f"{key} go")).output


@task_prerun.connect
def _mark_replay_attempt(sender: Any = None, args: Any = None, **_: Any) -> None:
    if sender is not None and sender.name == replay.name and args:
        mark(str(args[0]), "prerun")


@worker_ready.connect
def _announce_ready(sender: Any = None, **_: Any) -> None:
    # Celery logs its own "ready." at INFO; the benchmark workers run at WARNING.
    logger.warning("%s ready.", getattr(sender, "hostname", "worker"))
