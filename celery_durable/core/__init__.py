"""Core: what every layer may use, and which imports nothing of celery_durable but
``errors``: settings (``config``), JSON encoding (``serialization``), checks of what callers
hand over (``validate``), redaction, fault-injection points, log fields, tracing spans,
the retry policy (``retry``: backoff delays, what is worth another try) and the firing
times of periodic schedules (``slots``: what every schedule answers; ``cron``, whose
``cron_syntax`` reads the expressions, DST included; ``interval``).
"""
