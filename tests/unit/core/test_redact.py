"""``mask_urls``: the password of every URL in a text, and secret parameters, as ``***``."""

from __future__ import annotations

import pytest

from celery_durable.core.redact import mask_urls

CASES = {
    "libpq spelling": ("postgres://al:pw1@db/x", "postgres://al:***@db/x"),
    "driver": ("postgresql+psycopg://al:pw1@db:5432/x", "postgresql+psycopg://al:***@db:5432/x"),
    "no user": ("redis://:pw1@cache:6379/0", "redis://:***@cache:6379/0"),
    "malformed port": ("mysql://al:pw1@db:port/x", "mysql://al:***@db:port/x"),
    "@ in the password": ("postgres://al:p@w1@db/x", "postgres://al:***@db/x"),
    "quoted in a message": (
        "durable_database_url='postgres://al:pw1@db/x': use postgresql+psycopg",
        "durable_database_url='postgres://al:***@db/x': use postgresql+psycopg",
    ),
    "query": (
        "postgresql+psycopg://al@db/x?sslmode=require&sslpassword=pw1&application_name=a",
        "postgresql+psycopg://al@db/x?sslmode=require&sslpassword=***&application_name=a",
    ),
    "conninfo": ("host=db password=pw1 dbname=x", "host=db password=*** dbname=x"),
}


@pytest.mark.parametrize(("text", "masked"), CASES.values(), ids=CASES.keys())
def test_mask_urls(text: str, masked: str) -> None:
    assert mask_urls(text) == masked


@pytest.mark.parametrize(
    "text", ["sqlite:///celery_durable.sqlite3", "postgresql+psycopg://al@db/x", "no url here"]
)
def test_what_holds_no_password_is_unchanged(text: str) -> None:
    assert mask_urls(text) == text
