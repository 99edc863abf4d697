"""``celery -A app durable cancel|signal`` on runs they can't act on: one clean line, exit 1."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.cli import celery


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def finished_run(basic_app, key) -> str:  # type: ignore[no-untyped-def]
    """A run that ended (cancelled before any worker took it)."""
    handle = basic_app.cancellable.apply_async(args=(key,), queue=f"nobody-{key}")
    handle.cancel("finished for the test")
    return str(handle.id)


def test_cancel_a_finished_run_prints_its_status(finished_run):
    """Bug: a traceback of WorkflowAlreadyCompleted."""
    line = one_error_line(celery("durable", "cancel", finished_run))
    assert line == (
        f"Error: cannot cancel workflow run {finished_run!r}: its status is CANCELLED (finished)"
    )


def test_signal_a_finished_run_prints_its_status(finished_run):
    line = one_error_line(celery("durable", "signal", finished_run, "approval", '{"by": "x"}'))
    assert line == (
        f"Error: cannot signal 'approval' to workflow run {finished_run!r}: "
        "its status is CANCELLED (finished)"
    )


@pytest.mark.parametrize("command", [("cancel",), ("signal", "approval")])
def test_unknown_run_prints_one_line(basic_app, key, command):
    """Bug: a traceback of WorkflowNotFound."""
    line = one_error_line(celery("durable", *command[:1], f"nope-{key}", *command[1:]))
    namespace = basic_app.durable.config.namespace
    assert f"workflow run 'nope-{key}': no such run in namespace {namespace!r}" in line


def test_an_id_amqp_cannot_carry_is_a_bad_parameter(basic_app):
    emoji = "\N{GRINNING FACE}" * 100
    for command in (("cancel", emoji), ("signal", emoji, "approval"), ("show", emoji)):
        done = celery("durable", *command)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "Invalid value for WORKFLOW_ID: workflow_id=" in done.stderr
        assert "400 bytes in UTF-8, over the limit of 255" in done.stderr
