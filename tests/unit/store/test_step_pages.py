"""A run's history a page at a time, on both databases: a range of step indexes with a
limit, the count of all steps, and one step by index (what the dashboard and ``durable
show`` read instead of the whole history)."""

from __future__ import annotations

from celery_durable.store import StepRecord
from celery_durable.store.reads import count_steps, step_at, steps_page
from tests.support.builders import new_run


def test_a_page_of_steps_is_an_index_range_with_a_limit(store):
    store.insert_run(new_run("long"))
    store.insert_run(new_run("other"))
    claim = store.claim_run("long", "w", lease=30)
    for idx in range(30):
        step = StepRecord(idx, "tick", "ok", "[[],{}]", str(idx), None, 0.1)
        store.record_step("long", claim.fence, step)
    assert count_steps(store, "long") == 30 and count_steps(store, "other") == 0
    page = steps_page(store, "long", first=10, limit=8)
    assert [s.idx for s in page] == list(range(10, 18))
    assert [s.output for s in page] == [str(i) for i in range(10, 18)]
    assert [s.idx for s in steps_page(store, "long", first=25, limit=8)] == list(range(25, 30))
    assert steps_page(store, "long", first=30, limit=8) == []
    assert steps_page(store, "other", first=0, limit=8) == []
    found = step_at(store, "long", 12)
    assert found is not None and found.output == "12"
    assert step_at(store, "long", 30) is None
