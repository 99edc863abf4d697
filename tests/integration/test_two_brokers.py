"""Two apps on one database and namespace, with the same workflow names, one on Redis and
one on RabbitMQ: each sweeper dispatches only the runs of its own broker.

Each pass of the suite runs it with its broker (TEST_BROKER) as "ours" and the other one
as "theirs": a worker of tests.apps.basic on each, each on a queue of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.support.services import BROKER, BROKER_URLS, delete_queues, unique
from tests.support.twin import Twin, twin_app, twin_worker_env

THEIR_BROKER = next(name for name in BROKER_URLS if name != BROKER)
THEIR_URL = BROKER_URLS[THEIR_BROKER]
# A publish lost in a queue nobody reads costs a dispatch grace before the run's own
# sweeper publishes it again: a minute here, twice the deadline each run gets.
GRACE = {"CELERY_DURABLE_DISPATCH_GRACE": "60"}
DEADLINE = 30.0
RUNS = 4  # per app: each timer is a sweeper's to take (one in two, when both could)


@pytest.fixture
def their_queue(basic_app) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The other app's queue; deleted from its broker (with the namespace's signal queue
    there) after the test's workers are killed: a test lists it before start_worker."""
    queue = unique("q-twin-")
    yield queue
    delete_queues(THEIR_URL, [queue, basic_app.durable.config.signal_queue])


@pytest.fixture
def theirs(basic_app, their_queue) -> Iterator[Twin]:  # type: ignore[no-untyped-def]
    with twin_app(THEIR_URL, their_queue, [basic_app.sleeper]) as twin:
        yield twin


def dispatched_again(log: str) -> set[str]:
    """The ids of the runs a worker's sweeper published again."""
    return set(re.findall(r"dispatched workflow \S+ run (\S+) again", log))


def test_each_broker_sweeps_only_its_own_runs(basic_app, their_queue, start_worker, theirs, key):
    """Bug: a Redis worker's sweeper took the timer of a run of the RabbitMQ app (same
    database, namespace and workflow names) and published it to a Redis queue nobody
    reads: a 2 s cd.sleep took 3 min 4 s."""
    ours_worker = start_worker("ours", env=GRACE)
    # A run of ours, so that our broker is live on the namespace when theirs starts.
    basic_app.sleeper.delay(f"{key}-first", 0.0).get(timeout=DEADLINE)
    their_worker = start_worker(
        "theirs", env={**GRACE, **twin_worker_env(THEIR_URL, their_queue)}, queues=their_queue
    )
    ours = [basic_app.sleeper.delay(f"{key}-o{n}", 1.0) for n in range(RUNS)]
    sleeper = theirs.workflows[basic_app.sleeper.name]
    their_runs = [sleeper.delay(f"{key}-t{n}", 1.0) for n in range(RUNS)]
    for handle in ours + their_runs:
        assert isinstance(handle.get(timeout=DEADLINE), float)
    # Each timer was taken by the sweeper of its own broker, and by no other.
    assert not dispatched_again(ours_worker.log()) & {h.id for h in their_runs}
    assert not dispatched_again(their_worker.log()) & {h.id for h in ours}
    namespace = basic_app.durable.config.namespace
    warning = (
        f"WARNING/MainProcess] celery_durable: runs of namespace {namespace!r} are also "
        "dispatched through another broker"
    )
    log = their_worker.log()
    line = next((text for text in log.splitlines() if warning in text), None)
    assert line is not None, log
    ours_uri = basic_app.durable.runtime.dispatcher
    assert (
        ours_uri
        and theirs.durable.runtime.dispatcher
        and ours_uri != theirs.durable.runtime.dispatcher
    )
    assert ours_uri in line and theirs.durable.runtime.dispatcher in line
