"""Connections to the database: one pool per process (``pool``), the engine and psycopg
fast path (``connections``), LISTEN/NOTIFY or polling (``listener``; for asyncio callers,
``async_connections``: psycopg's AsyncConnection per event loop) and telling an outage
from other errors (``outage``), when this process last lost a connection (``losses``,
the liveness path's guard); ``dialect`` answers what Postgres and SQLite do
differently, for the statements and the operations alike; ``foreign`` runs the store's
statements in a transaction the store does not own (Django's).
"""
