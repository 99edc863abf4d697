"""Serve the dashboard with waitress (a production WSGI server) on 127.0.0.1 unless told
otherwise; never beyond loopback without authentication unless asked to.

Example::

    server = make_dashboard_server(durable, "127.0.0.1", 0)   # 0: any free port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.port)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from waitress import create_server

from celery_durable.errors import ConfigurationError
from celery_durable.ops.dashboard import dashboard_app, security

if TYPE_CHECKING:
    from celery_durable.ops.operations import Operations

logger = logging.getLogger("celery_durable.dashboard")
# Bound to every interface: no name of its own to allow.
WILDCARDS = ("0.0.0.0", "::", "")


class DashboardServer:
    """The dashboard on a waitress server, bound (not yet serving)."""

    def __init__(self, app: Any, address: str, port: int, trusted_proxies: int) -> None:
        self.server = create_server(
            app,
            host=address,
            port=port,
            threads=8,
            # waitress drops X-Forwarded-* unless told its sender is trusted; with
            # trusted_proxies the app's ProxyFix decides which of them to believe.
            clear_untrusted_proxy_headers=not trusted_proxies,
        )
        listening = getattr(self.server, "effective_listen", None)
        self.port = int(listening[0][1] if listening else self.server.effective_port)

    def serve_forever(self) -> None:
        self.server.run()

    def server_close(self) -> None:
        self.server.close()


def make_dashboard_server(
    durable: Operations,
    address: str = "127.0.0.1",
    port: int = 5580,
    *,
    allow_unauthenticated: bool = False,
    **options: Any,
) -> DashboardServer:
    """A server of the dashboard, bound (not yet serving). ConfigurationError if
    ``address`` is beyond loopback and neither ``basic_auth`` nor
    ``allow_unauthenticated`` is given. The Host names allowed default to loopback and
    ``address`` itself (unless it is every interface)."""
    refusal = security.exposure_refusal(
        address, bool(options.get("basic_auth")), allow_unauthenticated
    )
    if refusal is not None:
        raise ConfigurationError(refusal)
    if options.get("allowed_hosts") is None and address not in WILDCARDS:
        options["allowed_hosts"] = sorted({*security.LOOPBACK_HOSTS, address.strip("[]")})
    app = dashboard_app(durable, **options)
    return DashboardServer(app, address, port, int(options.get("trusted_proxies") or 0))


def serve(durable: Operations, address: str, port: int, echo: Any = print, **options: Any) -> None:
    """Serve until interrupted (Ctrl-C); what ``celery -A app durable dashboard`` runs."""
    server = make_dashboard_server(durable, address, port, **options)
    prefix = "/" + str(options.get("url_prefix") or "").strip("/")
    host = f"[{address}]" if ":" in address else address
    echo(f"celery_durable dashboard on http://{host}:{server.port}{prefix.rstrip('/')}/")
    if not security.is_loopback(address) and not options.get("basic_auth"):
        echo("warning: listening beyond this machine without --basic-auth")
    if address in WILDCARDS and not options.get("allowed_hosts"):
        names = ", ".join(security.LOOPBACK_HOSTS)
        echo(f"note: it answers to Host {names} only; give --allowed-hosts for other names")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
