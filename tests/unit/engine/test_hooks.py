"""Delivery hooks and step guards: the kernel of a delivery and of a step names no feature;
each feature plugs in through ``engine.hooks`` (wired by durable.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import grimp
import pytest
from celery import Celery

from celery_durable import Durable
from celery_durable.engine.hooks import Delivery, DeliveryHooks, leave_body
from celery_durable.wiring import wire

# Kernel modules of a delivery's path, and the feature modules none of them may import.
KERNEL = [
    "celery_durable.body.context",
    "celery_durable.body.replay",
    "celery_durable.engine.hooks",
    "celery_durable.engine.delivery",
    "celery_durable.engine.settle",
    "celery_durable.engine.finish",
]
FEATURES = [
    "celery_durable.limiters.limiter",
    "celery_durable.sagas.compensation",
    "celery_durable.limiters.run_slots",
    "celery_durable.canvas.reports",
    "celery_durable.sagas.rollback",
    "celery_durable.sagas.continued",
    "celery_durable.engine.deadlines",
    "celery_durable.canvas.by_name",
    "celery_durable.schedules.declared",
    "celery_durable.runs.starting",
]


def delivery(**fields: Any) -> Delivery:
    return Delivery(SimpleNamespace(), SimpleNamespace(), None, "run-1", "owner", **fields)  # type: ignore[arg-type]


def test_the_kernel_of_a_delivery_imports_no_feature():
    graph = grimp.build_graph(
        "celery_durable",
        include_external_packages=False,
        exclude_type_checking_imports=False,
        cache_dir=None,
    )
    found = {
        (kernel, feature)
        for kernel in KERNEL
        for feature in FEATURES
        if graph.direct_import_exists(importer=kernel, imported=feature)
    }
    assert found == set()


def test_the_first_claim_variant_with_a_claim_wins_else_the_plain_claim():
    hooks = DeliveryHooks()
    plain = delivery()
    assert hooks.claim(plain) == plain.claim_run
    hooks.claim_variants += [lambda d: None, lambda d: lambda: "second", lambda d: lambda: "third"]
    assert hooks.claim(plain)() == "second"


def test_fallbacks_are_tried_until_one_claims():
    tried: list[str] = []

    def fallback(name: str, claim: Any) -> Any:
        return lambda d: tried.append(name) or claim

    hooks = DeliveryHooks(
        claim_fallbacks=[fallback("a", None), fallback("b", "x"), fallback("c", "y")]
    )
    assert hooks.fall_back(delivery(), None) == "x"
    assert tried == ["a", "b"]
    assert hooks.fall_back(delivery(), "claimed") == "claimed"
    assert tried == ["a", "b"]


def test_what_the_hooks_before_the_body_took_is_given_back_if_a_later_one_raises():
    given: list[tuple[str, bool]] = []

    def taking(name: str) -> Any:
        return lambda d: lambda finished: given.append((name, finished))

    def failing(d: Delivery) -> None:
        raise RuntimeError("no")

    hooks = DeliveryHooks(before_body=[taking("a"), lambda d: None, taking("b"), failing])
    with pytest.raises(RuntimeError):
        hooks.enter_body(delivery())
    assert given == [("b", False), ("a", False)]
    given.clear()
    undos = DeliveryHooks(before_body=[taking("a"), taking("b")]).enter_body(delivery())
    leave_body(undos, finished=True)
    assert given == [("b", True), ("a", True)]


def test_durable_wires_each_feature_in(tmp_path, monkeypatch):
    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    app = Celery("hooks", broker="memory://")
    durable = Durable(app, database_url=f"sqlite:///{tmp_path / 'hooks.db'}")
    hooks = durable.runtime.hooks
    named = {
        f"{getattr(hook, '__module__', '')}.{getattr(hook, '__qualname__', type(hook).__name__)}"
        for each in (hooks.claim_variants, hooks.claim_fallbacks, hooks.before_body)
        for hook in each
    }
    assert "celery_durable.limiters.run_slots.claim_variant" in named
    assert "celery_durable.canvas.by_name.claim_started_by_name" in named
    assert "celery_durable.sagas.rollback.roll_back_instead" in named
    # Order matters: the canvas is known before a rollback reports; the slot argument and
    # the priority come before the run's slot is taken.
    before = [getattr(hook, "__name__", type(hook).__name__) for hook in hooks.before_body]
    assert before == [
        "report_claimed",
        "slot_argument",
        "note_deadline",
        "note_priority",
        "roll_back_instead",
        "run_slot",
        "note_validators",
    ]
    fallbacks = [hook.__name__ for hook in hooks.claim_fallbacks]
    assert fallbacks == ["claim_when_visible", "claim_started_by_name"]
    guards = [type(guard).__name__ for guard in hooks.step_guards]
    assert guards == ["LimiterGuard", "TerminateAtDeadline", "MarkCompensable"]
    listeners = [type(listener).__name__ for listener in hooks.settle_listeners]
    assert listeners == ["Report", "Continued", "Saga", "CloseStreams"]


def test_a_runtime_is_wired_once(tmp_path, monkeypatch):
    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    app = Celery("wired", broker="memory://")
    durable = Durable(app, database_url=f"sqlite:///{tmp_path / 'wired.db'}")
    with pytest.raises(RuntimeError, match="wired already"):
        wire(durable.runtime, app)
    assert len(durable.runtime.hooks.settle_listeners) == 4


def test_an_undo_that_fails_leaves_the_others_given_back(caplog):
    given: list[str] = []

    def failing(finished: bool) -> None:
        raise OSError("the store is gone")

    leave_body([lambda finished: given.append("first"), failing], finished=False)
    assert given == ["first"]
    assert "could not give back" in caplog.text
