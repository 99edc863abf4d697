"""``celery -A app durable dashboard``: the click command, without the extra's imports.

The CLI registers it with the function that finds the app's Durable; Flask is imported only
when the command runs, so the CLI works without the ``dashboard`` extra.

Example::

    durable_group.add_command(dashboard_command(find_durable))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from celery_durable.errors import ConfigurationError

if TYPE_CHECKING:
    from celery_durable.ops.operations import Operations


def dashboard_command(find: Callable[[click.Context], Operations]) -> click.Command:
    """The command, serving the Durable that ``find`` returns for the click context."""

    @click.command(
        name="dashboard",
        help="Serve the dashboard in a browser (pip install 'celery-durable[dashboard]').",
    )
    @click.option("--port", type=click.IntRange(0, 65535), default=5580, show_default=True)
    @click.option("--address", default="127.0.0.1", show_default=True)
    @click.option(
        "--basic-auth",
        envvar="CELERY_DURABLE_DASHBOARD_BASIC_AUTH",
        default=None,
        help="user:password[,user:password], as Flower's (or the env var of the same name).",
    )
    @click.option(
        "--allowed-hosts",
        envvar="CELERY_DURABLE_DASHBOARD_ALLOWED_HOSTS",
        default=None,
        help="Host names it answers to, comma-separated (.example.com: its subdomains; "
        "*: any). Default: localhost, 127.0.0.1, ::1 and --address.",
    )
    @click.option(
        "--allow-unauthenticated",
        is_flag=True,
        help="Serve beyond loopback without --basic-auth (something in front authenticates).",
    )
    @click.option(
        "--trusted-proxies",
        envvar="CELERY_DURABLE_DASHBOARD_TRUSTED_PROXIES",
        type=click.IntRange(0, 10),
        default=0,
        show_default=True,
        help="How many reverse proxies in front set X-Forwarded-*: honour that many.",
    )
    @click.option("--read-only", is_flag=True, help="Show runs, offer no action.")
    @click.option("--url-prefix", default="", help="Serve the pages under this path: /durable.")
    @click.pass_context
    def dashboard(
        ctx: click.Context,
        port: int,
        address: str,
        basic_auth: str | None,
        allowed_hosts: str | None,
        allow_unauthenticated: bool,
        trusted_proxies: int,
        read_only: bool,
        url_prefix: str,
    ) -> None:
        instance = find(ctx)
        try:
            from celery_durable.ops.dashboard.serve import serve
        except ImportError as exc:
            raise click.ClickException(
                f"the dashboard needs its extra: pip install 'celery-durable[dashboard]' ({exc})"
            ) from None
        try:
            serve(
                instance,
                address,
                port,
                echo=click.echo,
                basic_auth=basic_auth,
                allowed_hosts=allowed_hosts,
                allow_unauthenticated=allow_unauthenticated,
                trusted_proxies=trusted_proxies,
                read_only=read_only,
                url_prefix=url_prefix,
            )
        except ConfigurationError as exc:
            raise click.UsageError(str(exc)) from None
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--basic-auth") from None
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {address}:{port}: {exc}") from None

    return dashboard
