"""Which :class:`~celery_durable.Durable` instances are bound to which Celery app.

Worker bootsteps and the signal tasks are registered once per app and serve every Durable
bound to it; they look the instances up here.

Example::

    durables_of(app)                 # [<Durable namespace='default'>]
    durable_for(app, "default")      # the one that serves a namespace
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from celery import Celery

if TYPE_CHECKING:
    from .extension import Durable

_BOUND: weakref.WeakKeyDictionary[Celery, list[Durable]] = weakref.WeakKeyDictionary()


def bind(app: Celery, durable: Durable) -> None:
    _BOUND.setdefault(app, []).append(durable)


def durables_of(app: Celery) -> list[Durable]:
    """The Durable instances bound to ``app``, in the order they were created."""
    return list(_BOUND.get(app, []))


def durable_for(app: Celery, namespace: str) -> Durable:
    """The Durable of ``app`` that serves ``namespace``; LookupError naming it if none."""
    for durable in durables_of(app):
        if durable.config.namespace == namespace:
            return durable
    raise LookupError(f"no Durable with namespace {namespace!r} is bound to the app {app.main!r}")
