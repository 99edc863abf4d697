"""Who may see the dashboard and the runs in the admin, and act on them.

- ``CELERY_DURABLE_DASHBOARD_PERMISSION``: a permission (``"shop.view_orders"``) a user
  needs; unset (None), any active staff user may.
- ``CELERY_DURABLE_DASHBOARD_READ_ONLY``: True shows no actions (dashboard and admin)
  and refuses the dashboard's POSTs.

Example::

    allowed(request.user)      # True for staff, or for holders of the named permission
"""

from __future__ import annotations

from typing import Any

PERMISSION_SETTING = "CELERY_DURABLE_DASHBOARD_PERMISSION"
READ_ONLY_SETTING = "CELERY_DURABLE_DASHBOARD_READ_ONLY"


def permission() -> str | None:
    from django.conf import settings  # noqa: PLC0415 - read per request: tests override it

    return getattr(settings, PERMISSION_SETTING, None) or None


def read_only() -> bool:
    from django.conf import settings  # noqa: PLC0415

    return bool(getattr(settings, READ_ONLY_SETTING, False))


def allowed(user: Any) -> bool:
    """Whether an authenticated ``user`` may see the runs."""
    if not user.is_active:
        return False
    needed = permission()
    return bool(user.has_perm(needed)) if needed else bool(user.is_staff)


def may_act(user: Any) -> bool:
    """Whether ``user`` may cancel and resume runs (what the dashboard's actions allow)."""
    return allowed(user) and not read_only()
