"""The worker bootstep's refusal of a green pool (gevent, eventlet) for an app with async
workflows, checked against Celery's real pool classes; a real ``celery worker -P gevent``
is refused in tests/integration/test_async_pools.py."""

from __future__ import annotations

import pytest
from celery.concurrency import get_implementation

from celery_durable.engine.bootstep import refuse_green_pool
from celery_durable.engine.runtime import bound_runtimes
from celery_durable.errors import ConfigurationError


def test_a_green_pool_is_refused_naming_it_and_the_async_workflows(durable):
    @durable.workflow(name="shop.fetch_all")
    async def fetch_all() -> None:
        pass

    @durable.workflow(name="shop.plain")
    def plain() -> None:
        pass

    with pytest.raises(ConfigurationError) as refused:
        refuse_green_pool(get_implementation("gevent"), bound_runtimes(durable.app))
    text = str(refused.value)
    assert "the gevent pool (-P gevent) can't run async workflows" in text
    assert "this app has 1: shop.fetch_all." in text  # the plain one is not named
    assert "-P prefork, -P threads or -P solo" in text


@pytest.mark.parametrize("pool", ["prefork", "threads", "solo"])
def test_the_other_pools_run_async_workflows(durable, pool):
    @durable.workflow(name="shop.fetch_all")
    async def fetch_all() -> None:
        pass

    refuse_green_pool(get_implementation(pool), bound_runtimes(durable.app))


def test_a_green_pool_runs_an_app_without_async_workflows(durable):
    @durable.workflow(name="shop.plain")
    def plain() -> None:
        pass

    refuse_green_pool(get_implementation("gevent"), bound_runtimes(durable.app))
