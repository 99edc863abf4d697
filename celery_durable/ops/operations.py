"""The operator's calls of a ``Durable``: list, stats, bulk resume and
gc, each what the command of the same name runs. Mixed into Durable.

Example::

    durable.list_runs("failed", "shop.checkout", since="2h").runs
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from celery_durable.runs import admin as operations
from celery_durable.runs.admin import BulkResume, RunPage
from celery_durable.store import Collected, RunStats

if TYPE_CHECKING:
    from celery_durable.engine.runtime import Runtime


class Operations:
    """The operations of one Durable's runtime."""

    runtime: Runtime

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
        return operations.list_runs(
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
        return operations.stats(self.runtime)

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
        return operations.resume_runs(
            self.runtime,
            workflow=workflow,
            status=status,
            since=since,
            until=until,
            dry_run=dry_run,
        )

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
        return operations.gc(self.runtime, older_than, status, dry_run)
