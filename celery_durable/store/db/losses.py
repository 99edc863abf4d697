"""When this process last lost a connection to the store: the liveness path's guard.

A missing proof of life (``store/liveness.py``) means its owner died, unless the server
dropped connections itself (a restart, ``pg_terminate_backend``, an idle-session killer,
a proxy that fell over): then live owners lost theirs too, and take them again only when
they notice. A process that just lost a connection of its own is in that case, so it
trusts no missing proof of life for a while, and leases decide.

Example::

    losses = ConnectionLosses()
    losses.note()                       # a pooled connection was found broken
    losses.quiet_for(30.0)              # False: one was lost less than 30 s ago
"""

from __future__ import annotations

import os
import time


class ConnectionLosses:
    """The monotonic time of this process's last lost store connection."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._last = float("-inf")

    def note(self) -> None:
        """A connection of this process broke (or was thrown away in doubt)."""
        self._pid = os.getpid()
        self._last = time.monotonic()

    def quiet_for(self, seconds: float) -> bool:
        """No connection of this process was lost in the last ``seconds``. A forked child
        starts with its parent's record: a loss just before the fork still counts."""
        return time.monotonic() - self._last >= seconds
