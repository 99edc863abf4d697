"""Where the real services live (override with env vars) and how to reach them."""

from __future__ import annotations

import os
import uuid

import redis
import sqlalchemy as sa

PG_URL = os.environ.get("TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")

# The broker of this test session: TEST_BROKER=redis (default) or rabbitmq. Every test
# that touches a broker runs on both (the README's test command runs the suite per broker).
BROKER = os.environ.get("TEST_BROKER", "redis")
BROKER_URLS = {"redis": REDIS_URL, "rabbitmq": AMQP_URL}
# A broker of the same kind where nothing listens: publishing to it fails.
UNREACHABLE_BROKER_URLS = {
    "redis": "redis://127.0.0.1:1/0",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:1//",
}
if BROKER not in BROKER_URLS:
    raise RuntimeError(f"TEST_BROKER={BROKER!r}: use one of {', '.join(BROKER_URLS)}")
BROKER_URL = BROKER_URLS[BROKER]
UNREACHABLE_BROKER_URL = UNREACHABLE_BROKER_URLS[BROKER]


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


def delete_queues(broker_url: str, names: list[str]) -> None:
    """Remove a session's queues from the broker (RabbitMQ keeps durable queues)."""
    from kombu import Connection

    with Connection(broker_url, connect_timeout=5) as conn:
        channel = conn.default_channel
        for name in names:
            try:
                channel.queue_delete(name)
            except Exception:  # noqa: BLE001 - a queue that never existed
                channel = conn.channel()


def queue_length(broker_url: str, name: str) -> int:
    """How many messages wait in a queue (0 if it doesn't exist), on either broker."""
    from kombu import Connection

    with Connection(broker_url, connect_timeout=5) as conn:
        try:
            return int(conn.default_channel.queue_declare(name, passive=True).message_count)
        except Exception:  # noqa: BLE001 - a queue that doesn't exist (yet)
            return 0
