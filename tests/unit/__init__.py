"""Fast tests: the store on Postgres and SQLite, the body and the engine on the embedded
default (SQLite, Celery in eager mode). No worker subprocess, no broker. The folders mirror
the package's (tests/unit/store/test_items.py tests celery_durable/fanout/items.py)."""
