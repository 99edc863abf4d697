"""What the dashboard uses of a ``Durable``, as a Protocol: ``durable.py``
sits above ``ops``, so the dashboard names the methods it calls instead of importing it.

Example::

    def runs_page(durable: Operated, ...) -> dict[str, Any]:
        page = durable.list_runs("failed")     # a Durable is an Operated
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from celery import Celery

    from celery_durable.engine.runtime import Runtime
    from celery_durable.runs.admin import RunPage
    from celery_durable.runs.handle import WorkflowHandle
    from celery_durable.store import RunStats, Store


class Operated(Protocol):
    """The Durable the dashboard serves: its app, store, workflows and the operations."""

    app: Celery

    @property
    def runtime(self) -> Runtime: ...

    @property
    def store(self) -> Store: ...

    @property
    def workflows(self) -> Mapping[str, Any]: ...

    def list_runs(
        self,
        status: str | Iterable[str] | None = None,
        workflow: str | None = None,
        since: Any = None,
        until: Any = None,
        limit: int = 50,
        after: str | None = None,
    ) -> RunPage: ...

    def stats(self) -> RunStats: ...

    def get_handle(self, workflow_id: str) -> WorkflowHandle: ...
