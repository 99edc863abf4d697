"""Benchmarks of celery_durable against plain Celery on the same broker and worker settings.

Run ``python -m benchmarks`` (``--quick`` for a smoke run, ``--n`` to scale, ``--json PATH``).
It starts its own ``celery worker -P prefork -c 2`` subprocesses, uses a unique Redis queue,
durable namespace and table prefix per run, prints a table and writes JSON
(default ``benchmarks/results/latest.json``).
"""
