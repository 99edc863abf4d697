"""Durable Pydantic AI agents on Celery workers: ``CeleryDurability``, a Pydantic AI
durability capability (``pip install celery-durable[pydantic-ai]``).

Example::

    from pydantic_ai import Agent
    from celery_durable.contrib.pydantic_ai import CeleryDurability

    agent = Agent("openai:gpt-5", name="support", capabilities=[CeleryDurability()])
"""

from celery_durable.contrib.pydantic_ai.approvals import (
    afail_token,
    aresolve_token,
    fail_token,
    resolve_token,
)
from celery_durable.contrib.pydantic_ai.durability import CeleryDurability, CeleryOperationBackend

__all__ = [
    "CeleryDurability",
    "CeleryOperationBackend",
    "afail_token",
    "aresolve_token",
    "fail_token",
    "resolve_token",
]
