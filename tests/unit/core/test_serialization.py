"""core.serialization: the nesting-depth limit every stored value passes (issue 41, point 1)
and the rebuilding of stored errors, which never imports a module (point 10)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from celery_durable.canvas.reports import rebuilt_error
from celery_durable.core import serialization
from celery_durable.errors import NotSerialisable, StepFailed

SETTING = "durable_max_payload_depth"


def nested(depth: int) -> list:
    """``depth`` lists, one inside the other: ``json.loads("[" * depth + "]" * depth)``,
    the issue's 1 KB argument at 500 (built in a loop: json can't read the deepest)."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_nesting_depth_counts_lists_tuples_and_dicts_without_recursion():
    assert serialization.nesting_depth(7) == 0
    assert serialization.nesting_depth([]) == 1
    assert serialization.nesting_depth({"a": [1, (2, {"b": []})]}) == 5
    # Far deeper than recursion could go.
    assert serialization.nesting_depth(nested(50_000)) == 50_000


def test_arguments_nested_deeper_than_the_limit_are_refused_naming_the_argument():
    def echo(label: str, value: object) -> None: ...

    serialization.encode_arguments("workflow w", echo, ("a", nested(100)), {})  # the default
    with pytest.raises(NotSerialisable) as refused:
        serialization.encode_arguments("workflow w", echo, ("a", nested(500)), {})
    assert str(refused.value) == (
        "argument 'value' of workflow w is nested 500 levels deep, over the limit of 100 "
        f"({SETTING}); nothing was stored"
    )
    with pytest.raises(NotSerialisable, match="argument 'value' of workflow w is nested 6 "):
        serialization.encode_arguments("workflow w", echo, (), {"value": nested(6)}, None, 5)
    # Too deep for json itself (a RecursionError there): still the same clear refusal.
    with pytest.raises(NotSerialisable, match="'value' of workflow w is nested 5000 levels"):
        serialization.encode_arguments("workflow w", echo, ("a", nested(5000)), {})


def test_results_payloads_and_state_nested_too_deeply_are_refused_naming_them():
    assert serialization.encode_json("x", nested(3), None, 3) == "[[[]]]"
    with pytest.raises(NotSerialisable, match=f"the payload is nested 4 levels deep.*{SETTING}"):
        serialization.encode_json("the payload", nested(4), None, 3)
    with pytest.raises(NotSerialisable, match="the return value of step s is nested 3000"):
        serialization.encode_value("step s", {"a": nested(2999)})
    # Many brackets side by side are not depth.
    wide = [[i] for i in range(1000)]
    assert serialization.encode_json("wide", wide, None, 2).startswith("[[0],[1]")


def test_json_text_off_the_broker_is_measured_too():
    assert serialization.json_depth_problem("[[1],[2]]", 2) is None
    assert serialization.json_depth_problem('"[[[[[["', 2) is None  # brackets in a string
    problem = serialization.json_depth_problem("[" * 500 + "]" * 500, 100)
    assert problem == f"nested 500 levels deep, over the limit of 100 ({SETTING})"
    unreadable = serialization.json_depth_problem("[" * 100_000 + "]" * 100_000, 100)
    assert unreadable is not None and SETTING in unreadable


@pytest.fixture
def trap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module on sys.path whose import leaves a mark: rebuilding must never import it."""
    name = f"trap_{tmp_path.name.replace('-', '_')}"
    mark = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        f"open({str(mark)!r}, 'w').close()\nclass Boom(Exception):\n    pass\nnot_an_error = 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    assert not mark.exists(), "a stored error's module was imported"
    assert name not in sys.modules


def test_rebuilding_a_stored_error_never_imports_the_module_it_names(trap: str):
    """Bug: rebuilding imported whatever module the stored error named, before checking
    that it was an exception: a crafted row ran code in the worker."""
    for type_name in (f"{trap}.Boom", f"{trap}.not_an_error", f"{trap}.os.system"):
        text = json.dumps({"type": type_name, "message": "m", "args": ["m"], "traceback": ""})
        rebuilt = serialization.rebuild_exception("shop.charge", text)
        assert isinstance(rebuilt, StepFailed) and type_name in str(rebuilt)
        canvas = rebuilt_error({"type": type_name, "message": "m", "args": ["m"]})
        assert type(canvas).__name__ == type_name.rpartition(".")[2]
        assert not isinstance(canvas, StepFailed)


class OwnError(Exception):
    pass


def test_exceptions_of_loaded_modules_are_rebuilt_and_nothing_else_is():
    own = serialization.rebuild_exception(
        "s", json.dumps({"type": f"{__name__}.OwnError", "message": "x", "args": ["x"]})
    )
    assert type(own) is OwnError and own.args == ("x",)
    assert serialization.exception_class("builtins.KeyError") is KeyError
    assert serialization.exception_class("builtins.print") is None  # not an exception
    assert serialization.exception_class(f"{__name__}.nested") is None
    assert serialization.exception_class("os.path") is None  # a module, not a class
    assert serialization.exception_class("no_such_module_anywhere.Error") is None
