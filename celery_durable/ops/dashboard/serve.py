"""Serve the dashboard: a threaded WSGI server on 127.0.0.1 unless told otherwise.

Example::

    server = make_dashboard_server(durable, "127.0.0.1", 0)   # 0: any free port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.port)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from celery_durable.ops.dashboard import dashboard_app

if TYPE_CHECKING:
    from celery_durable.ops.dashboard.operated import Operated

logger = logging.getLogger("celery_durable.dashboard")


class _QuietHandler(WSGIRequestHandler):
    """One access-log line per request through the logging module, at DEBUG."""

    def log(self, type: str, message: str, *args: Any) -> None:  # noqa: A002 - werkzeug's
        logger.debug("%s " + message, self.address_string(), *args)


def make_dashboard_server(
    durable: Operated, address: str = "127.0.0.1", port: int = 5580, **options: Any
) -> BaseWSGIServer:
    """A threaded server of the dashboard, bound (not yet serving)."""
    app = dashboard_app(durable, **options)
    return make_server(address, port, app, threaded=True, request_handler=_QuietHandler)


def serve(durable: Operated, address: str, port: int, echo: Any = print, **options: Any) -> None:
    """Serve until interrupted (Ctrl-C); what ``celery -A app durable dashboard`` runs."""
    server = make_dashboard_server(durable, address, port, **options)
    prefix = "/" + str(options.get("url_prefix") or "").strip("/")
    host = f"[{address}]" if ":" in address else address
    echo(f"celery_durable dashboard on http://{host}:{server.port}{prefix.rstrip('/')}/")
    if address not in ("127.0.0.1", "localhost", "::1") and not options.get("basic_auth"):
        echo("warning: listening beyond this machine without --basic-auth")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
