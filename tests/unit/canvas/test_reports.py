"""The canvas a run stores when it starts (canvas/reports.py): taken from apply_async's
options or from a message, stored as JSON, and the run's error rebuilt for Celery."""

from __future__ import annotations

import datetime as dt

import pytest
from celery import Celery
from celery.app.task import Context

from celery_durable.canvas.reports import Canvas, neutralise, rebuilt_error


@pytest.fixture
def app():  # type: ignore[no-untyped-def]
    app = Celery("canvas-unit", broker="memory://", backend="cache+memory://")
    yield app
    app.close()


def test_the_canvas_options_are_taken_out_and_the_rest_stay(app):
    @app.task(name="unit.after")
    def after(value: object) -> None: ...

    options = {
        "link": after.s(),
        "link_error": [after.s(), after.s()],
        "chain": [after.s()],
        "group_id": "g1",
        "group_index": 3,
        "root_id": "root",
        "parent_id": "parent",
        "queue": "q",
        "ignore_result": False,
    }
    canvas = Canvas.from_options(app, options)
    assert options == {"root_id": "root", "parent_id": "parent", "queue": "q"}
    assert (canvas.report, canvas.group, canvas.group_index) == (True, "g1", 3)
    assert [sig["task"] for sig in (*canvas.callbacks, *canvas.errbacks)] == ["unit.after"] * 3
    encoded = canvas.encode("workflow w")
    assert encoded is not None and Canvas.decode(encoded).encode("workflow w") == encoded
    request = canvas.request("run-1", "w")
    assert (request.id, request.root_id, request.group, request.ignore_result) == (
        "run-1",
        "root",
        "g1",
        False,
    )


def test_a_run_that_reports_nothing_stores_no_canvas(app):
    assert Canvas.from_options(app, {"ignore_result": True}).encode("w") is None
    bare = Celery("bare", broker="memory://")  # no result backend
    assert Canvas.from_options(bare, {}).encode("w") is None
    assert Canvas.from_options(bare, {"link": {"task": "t"}}).encode("w") is not None
    assert Canvas.decode(Canvas(chord={"task": "body"}).encode("w") or "").chord == {"task": "body"}


def test_callbacks_json_cannot_hold_are_refused_naming_the_workflow(app):
    options = {"link": {"task": "t", "args": [object()], "kwargs": {}, "options": {}}}
    with pytest.raises(TypeError, match="workflow shop.checkout: its callbacks"):
        Canvas.from_options(app, options).encode("workflow shop.checkout")
    when = dt.datetime(2026, 12, 2, tzinfo=dt.timezone.utc)  # what Celery's JSON holds, kept
    link = {"task": "t", "args": [when], "kwargs": {}, "options": {}}
    kept = Canvas.decode(Canvas.from_options(app, {"link": link}).encode("w") or "")
    assert kept.callbacks[0]["args"] == [when]


def test_a_message_s_canvas_is_taken_out_of_its_request(app):
    request = Context(
        id="r",
        callbacks=[{"task": "next"}],
        errbacks=None,
        chain=[{"task": "c2"}, {"task": "c1"}],
        chord={"task": "body"},
        group="g",
        group_index=0,
        ignore_result=False,
    )
    carried = neutralise(app, request)
    assert (carried.callbacks, carried.chain, carried.chord) == (
        ({"task": "next"},),
        ({"task": "c2"}, {"task": "c1"}),
        {"task": "body"},
    )
    assert (request.callbacks, request.chain, request.chord, request.ignore_result) == (
        None,
        None,
        None,
        True,
    )


class OwnError(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code, detail)


def test_the_stored_error_is_rebuilt_by_type_and_arguments():
    error = rebuilt_error({"type": "builtins.KeyError", "message": "'x'", "args": ["x"]})
    assert type(error) is KeyError and error.args == ("x",)
    own = rebuilt_error({"type": f"{__name__}.OwnError", "args": [7, "late"]})
    assert type(own) is OwnError and own.args == (7, "late")
    gone = rebuilt_error({"type": "shop.errors.Declined", "message": "card", "args": None})
    assert (type(gone).__name__, type(gone).__module__, gone.args) == (
        "Declined",
        "shop.errors",
        ("card",),
    )
    # A constructor that refuses the stored arguments: the type's name and module stay.
    odd = rebuilt_error({"type": f"{__name__}.OwnError", "args": ["only one"]})
    assert (type(odd).__name__, odd.args) == ("OwnError", ("only one",))
