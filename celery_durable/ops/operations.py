"""The operator API, declared once: what ``celery -A app durable ...``, the dashboard and
the Django admin do to runs. ``runs.stored_runs`` implements it; this class is the one surface it
is reached through. A wing declares its own operations once, in a subclass of its own
(``limiters.operations.LimiterOperations``, ``schedules.operations.ScheduleOperations``),
and ``Durable`` inherits them all.

A ``Durable`` is an ``Operations`` (``durable.list_runs(...)``); code below ``durable.py``
(the dashboard, the CLI's command factories) takes an ``Operations``, which a Runtime makes
on its own, so nothing here imports the class that registers workflows; a wing's code makes
its own from it with ``of``.

Example::

    durable.list_runs("failed", "shop.checkout", since="2h").runs
    ScheduleOperations.of(Operations(durable.runtime)).pause_schedule("report-eu")
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from celery_durable.core import validate
from celery_durable.errors import WorkflowNotFound
from celery_durable.runs import stored_runs
from celery_durable.runs.handle import WorkflowHandle
from celery_durable.runs.stored_runs import BulkResume, RunDetails, RunPage
from celery_durable.store import Collected, Forked, ItemRow, Resumed, RunStats
from celery_durable.store.areas import ITEM_READS

if TYPE_CHECKING:
    from celery_durable.engine.runtime import Runtime

Wing = TypeVar("Wing", bound="Operations")


class Operations:
    """The operations on one runtime's runs: each what the command of the same name
    runs, and what the dashboard's pages and buttons call."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @classmethod
    def of(cls: type[Wing], operations: Operations) -> Wing:
        """``operations`` as this class (a wing's operations): the same object when it is
        one already (a Durable), else this class's own over the same runtime."""
        return operations if isinstance(operations, cls) else cls(operations.runtime)

    @property
    def runtime(self) -> Runtime:
        """Internal: the machinery beneath (the store, the sweeper, the lease keeper, the
        dispatcher), for celery_durable's own tests and integrations. Not a stable API: it
        may change in any release."""
        return self._runtime

    # -- runs ---------------------------------------------------------------------------------

    def get_handle(self, run_id: str) -> WorkflowHandle:
        """A handle for an existing run; WorkflowNotFound if there is none."""
        validate.check_run_id(run_id)
        run = self.runtime.store.get_run(run_id)
        if run is None:
            raise WorkflowNotFound(run_id)
        return WorkflowHandle(self.runtime, run_id, run.name)

    async def aget_handle(self, run_id: str) -> WorkflowHandle:
        """``get_handle``, awaited without blocking the event loop (psycopg's
        AsyncConnection on Postgres); WorkflowNotFound if there is no such run."""
        validate.check_run_id(run_id)
        run = await self.runtime.store.aget_run(run_id)
        if run is None:
            raise WorkflowNotFound(run_id)
        return WorkflowHandle(self.runtime, run_id, run.name)

    def list_runs(
        self,
        status: str | Iterable[str] | None = None,
        workflow: str | None = None,
        since: Any = None,
        until: Any = None,
        limit: int = 50,
        after: str | None = None,
    ) -> RunPage:
        """A page of runs, newest first; ``page.cursor`` (None on the last page) goes in
        ``after=`` for the next one. The cursor is a keyset position: runs started
        meanwhile never shift a page.

        ``status``: ``"failed"``, ``"failed,waiting"`` or a list; ``workflow``: its name;
        ``since``/``until``: when the run was created, as ``"2h"`` (ago), a ``timedelta``
        (ago), a ``datetime``, an ISO 8601 string or epoch seconds.

        Example: ``durable.list_runs("failed", "shop.checkout", since="2h").runs``
        """
        return stored_runs.list_runs(
            self.runtime,
            limit=limit,
            status=status,
            workflow=workflow,
            since=since,
            until=until,
            after=after,
        )

    def stats(self) -> RunStats:
        """Counts by workflow and status, the oldest pending and waiting runs and the due
        backlog (runs the sweeper should already have dispatched).

        Example: ``{(c.workflow, c.status): c.runs for c in durable.stats().counts}``
        """
        return stored_runs.stats(self.runtime)

    def describe_run(
        self, run_id: str, steps_from: int | None = 0, steps_limit: int = 0
    ) -> RunDetails | None:
        """What ``durable show`` prints: the run, a page of its steps, its unconsumed
        signals, its state keys and its actions log; None if there is no such run.
        ``steps_limit`` steps from index ``steps_from`` on (0: all); ``steps_from`` None:
        the last page."""
        return stored_runs.describe_run(self.runtime, run_id, steps_from, steps_limit)

    def list_items(self, run_id: str) -> list[ItemRow]:
        """The fan-out items of a run (parallel steps, remote steps, children), by step."""
        return ITEM_READS.of(self.runtime.store).list_items(run_id)

    def resume_run(self, run_id: str, timeout: Any = None) -> Resumed:
        """A FAILED or CANCELLED run PENDING again, from its first unfinished step, as
        ``handle.resume()`` does; ``timeout``: its new deadline from now."""
        return stored_runs.resume_run(self.runtime, run_id, timeout)

    def resume_runs(
        self,
        workflow: str,
        status: str | Iterable[str] = "failed",
        since: Any = None,
        until: Any = None,
        dry_run: bool = False,
    ) -> BulkResume:
        """Resume, after a fix is deployed, every FAILED (or CANCELLED) run of ``workflow``
        that ``list_runs`` gives for these filters; each as ``handle.resume()`` does. A run
        that changed status meanwhile is skipped, so running it twice resumes nothing more.

        Example: ``durable.resume_runs("shop.checkout", since="2h").resumed``
        """
        return stored_runs.resume_runs(
            self.runtime,
            workflow=workflow,
            status=status,
            since=since,
            until=until,
            dry_run=dry_run,
        )

    def fork_run(
        self,
        run_id: str,
        from_step: int,
        new_run_id: str | None = None,
        timeout: Any = None,
    ) -> Forked:
        """A new run keeping ``run_id``'s steps before ``from_step`` and its unconsumed
        signals, as ``handle.fork()`` does; returns the fork (its ``run``, published), named
        ``new_run_id`` (default: a new id)."""
        return stored_runs.fork_run(self.runtime, run_id, from_step, new_run_id, timeout)

    def record_action(
        self, run_id: str, action: str, actor: str | None, detail: str | None = None
    ) -> None:
        """Note in the run's actions log that ``actor`` (None: nobody authenticated) did
        ``action`` (cancel, resume, fork or signal) with ``detail``, once it is done."""
        stored_runs.record_action(self.runtime, run_id, action, actor, detail)

    def gc(
        self,
        older_than: Any,
        status: str | Iterable[str] | None = None,
        dry_run: bool = False,
    ) -> Collected:
        """Delete finished runs that finished more than ``older_than`` ago (``"30d"``,
        seconds or a timedelta), with their steps, signals and state, in batches of short
        transactions. ``status``: some of succeeded, failed, cancelled (default all); a
        pending, running or waiting run is never deleted. ``dry_run``: count only.

        Example: ``durable.gc("30d", dry_run=True).runs`` -> ``{"SUCCEEDED": 1200}``
        """
        return stored_runs.gc(self.runtime, older_than, status, dry_run)
