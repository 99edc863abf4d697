"""Integrations with other frameworks: each sits on top of the package (it may import
``celery_durable`` and its layers; nothing inside the package imports it)."""
