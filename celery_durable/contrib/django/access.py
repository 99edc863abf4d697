"""Who may see the runs (the dashboard and the admin) and act on them: Django's model
permissions of the ``Run`` model.

- ``celery_durable.view_run``: read runs, their steps, inputs and outputs (the dashboard's
  pages, the admin's list and detail).
- ``celery_durable.change_run``: act on them too: cancel, resume, fork, signal (the
  dashboard's actions, the admin's). Without it the dashboard shows no action.
- ``CELERY_DURABLE_DASHBOARD_PERMISSION``: one more permission (``"orders.view_order"``)
  needed for either, if set.
- ``CELERY_DURABLE_DASHBOARD_READ_ONLY``: True shows no actions to anyone (dashboard and
  admin) and refuses the dashboard's POSTs.

Superusers hold every permission; a staff user holds none until granted (``is_staff`` only
opens the admin site).

Example::

    may_view(request.user)     # True for holders of celery_durable.view_run
    may_act(request.user)      # ... and celery_durable.change_run
"""

from __future__ import annotations

from typing import Any

PERMISSION_SETTING = "CELERY_DURABLE_DASHBOARD_PERMISSION"
READ_ONLY_SETTING = "CELERY_DURABLE_DASHBOARD_READ_ONLY"
VIEW_PERMISSION = "celery_durable.view_run"
CHANGE_PERMISSION = "celery_durable.change_run"


def permission() -> str | None:
    from django.conf import settings  # noqa: PLC0415 - read per request: tests override it

    return getattr(settings, PERMISSION_SETTING, None) or None


def read_only() -> bool:
    from django.conf import settings  # noqa: PLC0415

    return bool(getattr(settings, READ_ONLY_SETTING, False))


def _holds(user: Any, needed: str) -> bool:
    if not user.is_active or not user.has_perm(needed):
        return False
    extra = permission()
    return bool(user.has_perm(extra)) if extra else True


def may_view(user: Any) -> bool:
    """Whether an authenticated ``user`` may see the runs (view or change permission, as
    Django's admin reads a view permission)."""
    return _holds(user, VIEW_PERMISSION) or _holds(user, CHANGE_PERMISSION)


def may_act(user: Any) -> bool:
    """Whether ``user`` may cancel, resume, fork and signal runs."""
    return _holds(user, CHANGE_PERMISSION) and not read_only()
