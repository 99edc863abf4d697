"""Where the real services live (override with env vars) and how to reach them."""

from __future__ import annotations

import os
import uuid

import redis
import sqlalchemy as sa

PG_URL = os.environ.get("TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL, decode_responses=True)


def effects(rds: redis.Redis, key: str, step: str) -> int:
    """How many times ``step`` really ran for ``key`` (tests/apps/basic.py counts them)."""
    return int(rds.get(f"effects:{key}:{step}") or 0)


def drop_tables(url: str, prefix: str) -> None:
    engine = sa.create_engine(url)
    try:
        meta = sa.MetaData()
        # Only ours: another session may drop its own tables while we reflect.
        meta.reflect(engine, only=lambda name, _meta: name.startswith(prefix))
        doomed = [t for name, t in meta.tables.items() if name.startswith(prefix)]
        meta.drop_all(engine, tables=doomed)
    finally:
        engine.dispose()
