"""The dashboard: runs, a run's steps, the operator's actions and workflows, in a browser.

Needs the ``dashboard`` extra (``pip install "celery-durable[dashboard]"``: Flask).
Serve it with ``celery -A app durable dashboard`` or mount it in a web app of your own.

Example::

    wsgi_app = durable.dashboard_app(basic_auth="ops:s3cret")            # WSGI (Flask)
    asgi_app = durable.dashboard_app(asgi=True, url_prefix="/durable")   # ASGI
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery_durable.ops.operations import Operations


def dashboard_app(durable: Operations, *, asgi: bool = False, **options: Any) -> Any:
    """The dashboard as a WSGI application, or an ASGI one when ``asgi`` (through
    a2wsgi, part of the extra). ``options``: see ``celery_durable.ops.dashboard.web.create_app``.
    """
    try:
        from celery_durable.ops.dashboard.web import create_app
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"the dashboard needs its extra: pip install 'celery-durable[dashboard]' ({exc})"
        ) from exc
    app = create_app(durable, **options)
    if not asgi:
        return app
    from a2wsgi import WSGIMiddleware

    return WSGIMiddleware(app)  # type: ignore[arg-type]


__all__ = ["dashboard_app"]
