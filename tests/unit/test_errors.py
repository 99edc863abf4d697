"""celery_durable.errors: every error type the package stores with a failed run names a class
there, so ``WorkflowFailed.error_type`` can be caught, looked up and documented."""

from __future__ import annotations

import re

import celery_durable
from celery_durable import errors
from tests.support.workers import ROOT

STORED = re.compile(r"""["']celery_durable\.errors\.(\w+)["']""")


def stored_error_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "celery_durable").rglob("*.py"):
        names |= set(STORED.findall(path.read_text()))
    return names


def test_every_stored_error_type_is_a_public_class_of_celery_durable_errors() -> None:
    names = stored_error_names()
    assert {"WorkerLost", "NeverClaimed"} <= names  # the sweeper's poison verdicts
    missing = sorted(name for name in names if not isinstance(getattr(errors, name, None), type))
    assert missing == []
    unexported = sorted(
        name
        for name in names
        if isinstance(getattr(errors, name, None), type)
        and issubclass(getattr(errors, name), Exception)
        and name not in celery_durable.__all__
    )
    assert unexported == []
