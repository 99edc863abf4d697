"""Celery's file broker (kombu's filesystem transport), made safe for the examples' workers.

kombu writes a message into the folder in place: the file exists, empty, before its bytes
are written, and a consumer polling the folder can take it then, fail to decode it and stop
the worker ("JSONDecodeError: Expecting value"; celery/kombu#1551). It shows where a worker
publishes often (a schedule's sweeper each second). Here a message is written under a name
no consumer reads, then renamed into place, which is atomic.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


def _put(self: Any, queue: str, payload: Any, **kwargs: Any) -> None:
    name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
    final = os.path.join(self.data_folder_out, name)
    aside = os.path.join(self.data_folder_out, f".writing-{uuid.uuid4()}")
    with open(aside, "wb") as file:
        file.write(str_to_bytes(dumps(payload)))
    os.replace(aside, final)


def make_atomic() -> None:
    """Publish whole messages only (idempotent)."""
    filesystem.Channel._put = _put  # noqa: SLF001 - kombu's own method, replaced
