"""The runs in the Django admin, read-only: filters by status and workflow, a link from
each run to its dashboard page, and two actions, cancel and resume, each asking for
confirmation first and then doing what ``manage.py durable cancel`` / ``resume`` do.

Listed only when the store's URL came from ``DATABASES`` (the runs must be on a Django
database alias; see ``models``): otherwise no one sees
them there. Who may see them (``celery_durable.view_run``) and act
(``celery_durable.change_run``): ``access``. No add,
change form or delete: runs change through the operations only. Each action is in the
admin's log and in the run's actions, with the user who acted.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import ImproperlyConfigured
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from celery_durable.contrib.django import access
from celery_durable.contrib.django.models import Run, bound
from celery_durable.contrib.django.setup import durable
from celery_durable.errors import DurableError
from celery_durable.ops import console

QUESTIONS = {
    "cancel_runs": "Cancel these runs? A pending or waiting run is cancelled at once, a "
    "running one at its next step; their children are cancelled too.",
    "resume_runs": "Resume these runs (failed or cancelled) from their first unfinished step?",
}


def dashboard_url(run_id: str) -> str | None:
    """The run's dashboard page, if the project mounted the dashboard's URLs."""
    try:
        runs_page = reverse("celery_durable:dashboard", kwargs={"path": ""})
    except NoReverseMatch:
        return None
    return f"{runs_page}run/{quote(run_id, safe='')}"


def listed() -> bool:
    """Whether the runs are on a Django alias. Asked per request, not at import: the
    admin's modules load before this app's ``ready`` lets the store find DATABASES."""
    try:
        bound()
    except (ImproperlyConfigured, DurableError):
        # A broken config is reported by every command; the admin just leaves runs out.
        return False
    return True


def when(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)


class RunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "status", "name", "attempts", "created", "finished", "summary", "page")
    list_filter = ("status", "name")
    search_fields = ("^id",)
    # A count of every run for each page would cost more than the page.
    show_full_result_count = False
    actions = ("cancel_runs", "resume_runs")
    fields = readonly_fields = (
        "id",
        "name",
        "status",
        "summary",
        "attempts",
        "max_attempts",
        "queue",
        "wait_signal",
        "cancel_requested",
        "cancel_reason",
        "created",
        "started",
        "finished",
        "parent_id",
        "forked_from",
        "page",
    )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return listed() and access.may_view(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return listed() and access.may_view(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return access.may_act(request.user)

    @admin.display(description="created", ordering="created_at")
    def created(self, run: Run) -> datetime | None:
        return when(run.created_at)

    @admin.display(description="started", ordering="started_at")
    def started(self, run: Run) -> datetime | None:
        return when(run.started_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, run: Run) -> datetime | None:
        return when(run.finished_at)

    @admin.display(description="error or what it waits for")
    def summary(self, run: Run) -> str:
        if run.error:
            return console.error_summary(run.error, width=120)
        return f"signal {run.wait_signal}" if run.wait_signal else ""

    @admin.display(description="dashboard")
    def page(self, run: Run) -> str:
        url = dashboard_url(run.id)
        return format_html('<a href="{}" class="dashboard-link">open</a>', url) if url else "-"

    @admin.action(description="Cancel selected runs", permissions=["operate"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> Any:
        return self.confirmed(request, queryset, "cancel_runs")

    @admin.action(description="Resume selected runs", permissions=["operate"])
    def resume_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> Any:
        return self.confirmed(request, queryset, "resume_runs")

    def confirmed(self, request: HttpRequest, queryset: QuerySet[Run], action: str) -> Any:
        """The confirmation page, or, once confirmed (``post=yes``, as Django's delete
        asks), the operation on each run; None goes back to the list."""
        if request.POST.get("post") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "title": "Are you sure?",
                "question": QUESTIONS[action],
                "queryset": queryset,
                "action": action,
                "opts": self.model._meta,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "media": self.media,
            }
            request.current_app = self.admin_site.name
            template = "admin/celery_durable/run/confirm_action.html"
            return TemplateResponse(request, template, context)
        reason = request.POST.get("reason") or None
        for run in queryset:
            self.operate(request, run, action, reason)
        return None

    def operate(self, request: HttpRequest, run: Run, action: str, reason: str | None) -> None:
        instance = durable()
        handle = instance.get_handle(run.id)
        try:
            if action == "cancel_runs":
                status = handle.cancel(reason)
                pending = "" if status.finished else f" ({console.cancel_pending(status)})"
                said = f"cancel requested: the run is {status}{pending}"
                done, detail = "cancel", reason
            else:
                said = f"resumed: the run is {handle.resume()}"
                done, detail = "resume", None
        except DurableError as exc:
            self.message_user(request, f"{run.id}: not done: {exc}", messages.ERROR)
            return
        self.log_change(request, run, said)
        instance.record_action(run.id, done, request.user.get_username(), detail)
        self.message_user(request, f"{run.id}: {said}", messages.SUCCESS)


admin.site.register(Run, RunAdmin)
