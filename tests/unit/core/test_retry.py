"""The retry policy's two rules, each written once (celery_durable/core/retry.py): the
delay before the next try (first delay doubled per try, capped) and whether a failure is
worth another try; and the step's options (StepOptions), listed once."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest
from celery import Celery

from celery_durable import Durable, NonDeterminismError, PermanentError
from celery_durable import durable as durable_module
from celery_durable.body.step import StepOptions
from celery_durable.core.retry import backoff, retryable


def test_a_step_with_many_attempts_waits_its_cap_instead_of_overflowing():
    # 2 ** 1099 is past a float: the delay used to raise OverflowError at attempt 1100 of
    # a step told to retry for a long time, ending it instead of waiting max_backoff.
    durable = Durable(Celery("retry-overflow"), database_url="sqlite://")

    @durable.step(max_attempts=5000, backoff=1.0, max_backoff=60.0)
    def patient() -> None: ...

    @durable.step(max_attempts=5000)
    def eager() -> None: ...

    assert patient.delay_after(1100) == 60.0
    assert eager.delay_after(1100) == 0.0


def test_backoff_doubles_the_first_delay_up_to_the_cap():
    assert [backoff(0.5, n, 60.0) for n in range(9)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        32.0,
        60.0,
        60.0,
    ]
    assert backoff(5.0, -1, 3600.0) == 2.5  # a first attempt's delay: first / 2, as before
    assert backoff(0.0, 10**6, 60.0) == 0.0
    assert backoff(1.0, 10**6, 30.0) == 30.0
    assert isinstance(backoff(1, 2, 60), float)


class Transient(Exception):
    pass


class Fatal(Transient):
    pass


def test_retryable_refuses_permanent_replayed_and_excluded_failures():
    assert retryable(Transient()) and retryable(KeyboardInterrupt())
    assert not retryable(PermanentError("no"))
    assert not retryable(NonDeterminismError("changed"))
    replayed = Transient()
    replayed.final = True  # type: ignore[attr-defined]
    assert not retryable(replayed)
    assert retryable(Transient(), (Transient,), (Fatal,))
    assert not retryable(Fatal(), (Transient,), (Fatal,))
    assert not retryable(ValueError(), (Transient,))


def test_the_typed_overload_of_durable_step_lists_exactly_the_step_options():
    # StepOptions is the one definition; the overload repeats it only because type
    # checkers need the keywords spelled out. Names, annotations and defaults must agree.
    source = inspect.getsource(durable_module)
    overloads = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef)
        and node.name == "step"
        and any(ast.unparse(d) == "overload" for d in node.decorator_list)
        and node.args.kwonlyargs
    ]
    assert len(overloads) == 1
    args = overloads[0].args
    spelled = {
        arg.arg: (ast.unparse(arg.annotation), eval(ast.unparse(default), vars(durable_module)))
        for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
        if arg.arg != "name" and arg.annotation is not None and default is not None
    }
    assert spelled == {
        field.name: (field.type, field.default) for field in dataclasses.fields(StepOptions)
    }


def test_durable_step_keeps_its_options_and_refuses_an_unknown_one():
    durable = Durable(Celery("retry-options"), database_url="sqlite://")

    @durable.step(max_attempts=3, backoff=0.5, retry_on=[ConnectionError], queue="gpu")
    def charge() -> None: ...

    assert charge.options == StepOptions(
        max_attempts=3, backoff=0.5, retry_on=(ConnectionError,), queue="gpu"
    )
    assert [charge.delay_after(n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    with pytest.raises(TypeError, match="max_attempt"):
        durable.step(max_attempt=3)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="step .*refund: max_attempts must be at least 1"):

        @durable.step(max_attempts=0)
        def refund() -> None: ...


def test_a_steps_options_still_read_as_its_attributes():
    durable = Durable(Celery("options"), database_url="sqlite://")

    @durable.step(max_attempts=3, queue="gpu", name="t.attrs")
    def routed() -> None: ...

    assert (routed.max_attempts, routed.queue, routed.commit) == (3, "gpu", "each")
    with pytest.raises(AttributeError, match="no attribute 'max_attempt'"):
        routed.max_attempt  # noqa: B018 - the typo must not read as None
