"""RabbitMQ specifics: quorum queues, and a delivery held past consumer_timeout.

Run on the RabbitMQ pass of the suite (TEST_BROKER=rabbitmq); skipped on Redis.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from celery_durable import WorkflowStatus
from tests.support.services import BROKER, effects, unique
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(BROKER != "rabbitmq", reason="RabbitMQ only")


def rabbit_env(name: str, value: int) -> None:
    done = subprocess.run(
        ["rabbitmqctl", "eval", f"application:set_env(rabbit, {name}, {value})."],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def short_consumer_timeout() -> Iterator[int]:
    """consumer_timeout of 3 s for channels opened meanwhile (checked every second)."""
    rabbit_env("consumer_timeout", 3000)
    rabbit_env("channel_tick_interval", 1000)
    try:
        yield 3
    finally:
        rabbit_env("consumer_timeout", 1_800_000)
        rabbit_env("channel_tick_interval", 60_000)


@pytest.mark.serial  # consumer_timeout is the node's: any channel opened meanwhile gets it
def test_a_step_longer_than_consumer_timeout_neither_runs_twice_nor_is_lost(
    basic_app, start_worker, key, rds, short_consumer_timeout
):
    """RabbitMQ closes the channel of a delivery left unacked past consumer_timeout and
    redelivers the message while the first run is still going: the lease, not the
    broker, decides who runs it."""
    worker = start_worker("consumer-timeout")
    rds.set(f"block:{key}:s2", "1")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s2"), 30, message="step 2 to start")
    wait_until(
        lambda: "acknowledgement" in worker.log() and "timed out" in worker.log(),
        60,
        message=lambda: f"RabbitMQ to close the channel:\n{worker.log()[-3000:]}",
    )
    rds.delete(f"block:{key}:s2")
    assert handle.get(timeout=60) == [10, 20, 30, 40, 50]
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1] * 5
    assert handle.record().attempts == 1
    assert worker.proc.poll() is None, worker.log()


def test_workflows_on_a_quorum_queue(basic_app, start_worker, key, rds):
    """Quorum queues (x-queue-type: quorum, counted redeliveries): runs, signals and a
    SIGKILL recovery work on one."""
    from kombu import Queue

    queue = unique("quorum-")
    quorum = Queue(queue, queue_arguments={"x-queue-type": "quorum"}, durable=True)
    basic_app.app.amqp.queues.add(quorum)  # the producer declares it as the worker does
    env = {"TEST_QUEUE": queue, "TEST_QUEUE_TYPE": "quorum"}
    first = start_worker("quorum-a", env=env, queues=queue)
    rds.set(f"block:{key}:s3", "1")
    crashed = basic_app.five_steps.apply_async(args=(key,), queue=queue)
    waiting = basic_app.booking.apply_async(args=(f"{key}-b", 600), queue=queue)
    assert crashed.record().queue == queue
    wait_until(lambda: rds.get(f"started:{key}:s3"), 30, message="step 3 to start")
    wait_until(lambda: waiting.status() is WorkflowStatus.WAITING, 30, message="WAITING")
    first.kill()
    rds.delete(f"block:{key}:s3")
    second = start_worker("quorum-b", env=env, queues=queue)
    assert crashed.get(timeout=60) == [10, 20, 30, 40, 50]
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1, 1, 2, 1, 1]
    assert waiting.signal("approval", {"by": "quorum"})
    assert waiting.get(timeout=60)["status"] == "confirmed"
    listed = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", "name", "type"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert f"{queue}\tquorum" in listed  # it really was a quorum queue
    assert second.proc.poll() is None, second.log()
    from tests.support.services import BROKER_URL, delete_queues

    delete_queues(BROKER_URL, [queue])
