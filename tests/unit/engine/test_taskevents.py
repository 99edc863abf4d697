"""What a delivery returns to Celery, which Celery only shows (its "Task ... succeeded"
line, Flower's result): masked by ``durable_redact``; a redactor that raises hides the
value and fails nothing. The real worker's line: tests/integration/test_secrets.py."""

from __future__ import annotations

from typing import Any

from celery import Celery

from celery_durable.engine.taskevents import finished_task


def shown(redact: Any) -> Any:
    app = Celery("shown", broker="memory://")
    app.conf.durable_redact = redact
    return finished_task(app, "run-1", {"token": "s3cret", "n": 1}, "[workflow=run-1]")


def test_the_value_celery_shows_is_masked():
    assert shown(["token"]) == {"token": "***", "n": 1}
    assert shown(None) == {"token": "s3cret", "n": 1}


def test_a_redactor_that_raises_hides_the_value():
    def broken(value: Any) -> Any:
        raise ValueError("bug in the user's redactor")

    assert shown(broken) == "<not shown: durable_redact raised ValueError>"
