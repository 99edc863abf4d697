"""Starts that name an active run: ``dedup_key`` (while a run of the workflow with that key
is PENDING, RUNNING or WAITING, a start returns its handle) and ``debounce`` (while it
hasn't started, each call moves its start and replaces its arguments).

The database decides: the runs' unique index on (workflow, dedup key) among active runs
makes concurrent starts insert one run; a debounced call is one UPDATE, so the last call to
commit gives the arguments.

Example::

    dedup = Dedup.from_options("workflow shop.sync_user", options)    # pops the options
    existing = dedup.existing(runtime, "shop.sync_user", run.args)     # after a refused insert
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from celery_durable.core import validate
from celery_durable.errors import InvalidArgument

if TYPE_CHECKING:
    from celery_durable.engine.runtime import Runtime


@dataclasses.dataclass(frozen=True)
class Dedup:
    key: str | None = None
    debounce: float | None = None
    max_wait: float | None = None

    @classmethod
    def from_options(cls, owner: str, options: dict[str, Any]) -> Dedup:
        """Take ``dedup_key``, ``debounce`` and ``debounce_max_wait`` out of ``options``; a
        debounced start is delayed by ``debounce`` (``countdown``)."""
        key = options.pop("dedup_key", None)
        debounce = options.pop("debounce", None)
        max_wait = options.pop("debounce_max_wait", None)
        if key is None:
            if debounce is not None or max_wait is not None:
                raise InvalidArgument(f"{owner}: debounce needs a dedup_key to name the run")
            return cls()
        validate.check_text(key, f"{owner}: dedup_key", max_chars=255, allow_empty=False)
        seconds = _seconds(debounce, f"{owner}: debounce")
        cap = _seconds(max_wait, f"{owner}: debounce_max_wait")
        if seconds is not None:
            if options.get("countdown") is not None or options.get("eta") is not None:
                raise InvalidArgument(f"{owner}: debounce sets the start; drop countdown/eta")
            options["countdown"] = seconds if cap is None else min(seconds, cap)
        return cls(key, seconds, cap)

    def existing(self, runtime: Runtime, name: str, args: str) -> str | None:
        """The active run of this key (None: none, the insert was refused for its id); a
        debounced call moves its start and gives it ``args`` if it hasn't started."""
        if self.key is None:
            return None
        found = runtime.store.find_active_dedup(name, self.key)
        if found is not None and self.debounce is not None:
            runtime.store.debounce_run(found, args, self.debounce, self.max_wait)
        return found


def _seconds(value: Any, argument: str) -> float | None:
    return None if value is None else validate.parse_duration(value, argument)
