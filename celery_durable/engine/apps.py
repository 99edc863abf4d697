"""Which ``Runtime`` (one per Durable) is bound to
which Celery app.

Worker bootsteps and the signal tasks are registered once per app and serve every Durable
bound to it; they look their runtimes up here.

Example::

    runtimes_of(app)                 # [<Runtime app='shop' settings=[...]>]
    runtime_for(app, "default")      # the one that serves a namespace
    broker_identity(app)             # 'redis://127.0.0.1:6379/0': whose runs it dispatches
    hide_secret_settings()           # celery inspect conf shows durable_listen_url masked
"""

from __future__ import annotations

import hashlib
import re
import weakref
from typing import TYPE_CHECKING

from celery import Celery
from celery.app import utils as celery_settings

from celery_durable.core.redact import mask_urls
from celery_durable.core.settings import SECRET_SETTINGS

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

# The runs table's dispatcher column is a String(255).
DISPATCHER_MAX = 255

_BOUND: weakref.WeakKeyDictionary[Celery, list[RuntimeView]] = weakref.WeakKeyDictionary()


def bind(app: Celery, runtime: RuntimeView) -> None:
    _BOUND.setdefault(app, []).append(runtime)


def runtimes_of(app: Celery) -> list[RuntimeView]:
    """The runtimes of the Durable instances bound to ``app``, in the order they were created."""
    return list(_BOUND.get(app, []))


def runtime_for(app: Celery, namespace: str) -> RuntimeView:
    """The runtime of ``app``'s Durable that serves ``namespace``; LookupError naming it
    if none."""
    for runtime in runtimes_of(app):
        if runtime.config.namespace == namespace:
            return runtime
    raise LookupError(f"no Durable with namespace {namespace!r} is bound to the app {app.main!r}")


def broker_identity(app: Celery) -> str:
    """The broker ``app`` publishes to, as its runs record it: the URL kombu normalises
    (default port and virtual host filled in, the first of a failover list), without the
    password, so that every process of one deployment gives the same one and a password
    change keeps it. It names the broker in logs too; one over 255 characters ends in a
    digest of the rest."""
    try:
        uri = app.connection_for_write().as_uri()
    except Exception:  # noqa: BLE001 - a transport this process can't import (producer-only)
        from kombu.utils.url import maybe_sanitize_url

        uri = str(maybe_sanitize_url(str(app.conf.broker_url or "amqp://")))
    # kombu masks the password as "**"; a URL that had none reads better without it.
    uri = uri.replace(":**@", "@").replace("://@", "://")
    uri = mask_urls(uri)  # kombu leaves a password in the query string (?password=)
    if len(uri) > DISPATCHER_MAX:
        digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
        uri = f"{uri[: DISPATCHER_MAX - 17]}#{digest}"
    return uri


def hide_secret_settings() -> None:
    """Have Celery mask the library's secret settings (URLs that may hold a password)
    wherever it shows its configuration: the control ``conf`` reply behind ``celery
    inspect conf``, which Flower's worker page shows. Celery masks by name only, through
    one pattern (``celery.app.utils.HIDDEN_SETTINGS``): the names it misses join it, once."""
    pattern = celery_settings.HIDDEN_SETTINGS
    missing = [name for name in SECRET_SETTINGS if not pattern.search(name)]
    if missing:
        extra = "|".join(re.escape(name) for name in missing)
        celery_settings.HIDDEN_SETTINGS = re.compile(f"{pattern.pattern}|{extra}", pattern.flags)
