"""The Store's proof of life of a process: a session-level advisory lock keyed on its
owner id, held on a connection of its own. Mixed into
``Store``; the SQL is in ``sql/liveness.py``.

When the process dies its connection closes, the server ends the session and the lock
goes with it: a claimant that finds the process's lease can take the run over at once
(``Builder.owner_is_gone``) instead of waiting for the lease to expire. A process that
is only paused keeps its session and its lock, so its leases stand.

Example::

    proof = store.proof_of_life("host:4242:1a2b3c4d")     # None: no liveness here
    if proof is not None and proof.hold():
        claim = store.claim_run(run_id, proof.owner, lease)
"""

from __future__ import annotations

import os
import select
import threading
from typing import Any

from celery_durable.store.db.connections import Connections
from celery_durable.store.sql.build import PROOF_OF_LIFE, params
from celery_durable.store.sql.statements import Statements


class ProofOfLife:
    """One process's lock on a connection of its own; ``owner`` is the id to record."""

    def __init__(self, db: Connections, sql: Statements, base_owner: str) -> None:
        self.db = db
        self.sql = sql
        self.owner = base_owner + PROOF_OF_LIFE
        self._pid = os.getpid()
        self._conn: Any = None
        self._lock = threading.Lock()
        self.released = False

    @property
    def held(self) -> bool:
        """The lock's connection is open, as far as this process knows (no round trip)."""
        conn = self._conn
        return conn is not None and not conn.closed and not conn.broken

    def hold(self) -> bool:
        """Take the lock if it isn't held (first claim, or its connection dropped); False:
        another session holds the key for now (a claimant checking it). Raises when the
        server can't be reached."""
        if self._pid != os.getpid():
            raise RuntimeError("a proof of life belongs to the process that made it")
        if self.held:
            return True
        if self.released:
            return False
        with self._lock:
            if self.held:
                return True
            if self._conn is not None:
                self._lost()
            conn = self.db.session_connection()
            try:
                taken = self.db.execute_on(
                    conn, self.sql.liveness.take_proof_of_life, params(owner=self.owner)
                )
            except BaseException:
                conn.close()
                raise
            if not (taken and taken[0]):
                conn.close()
                return False
            self._conn = conn
            return True

    def check(self) -> bool:
        """A round trip on the lock's connection: a dropped one is taken again."""
        with self._lock:
            if self.held:
                try:
                    self._conn.execute("SELECT 1")
                except Exception:  # noqa: BLE001 - any failure means the session is gone
                    self._lost()
        return self.hold()

    def wait_for_news(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the lock's connection to hear from the server, as
        it does when the server ends the session (a FATAL error, then EOF): no round trip.
        True: something came, or the lock isn't held; ``check()`` says which."""
        conn = self._conn
        if conn is None or not self.held:
            return True
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], timeout)
        except (OSError, ValueError):  # closed under us
            return True
        return bool(readable)

    def release(self) -> None:
        """Give the lock back (process exit, after the leases): the session ends."""
        with self._lock:
            self.released = True
            if self._pid == os.getpid():
                self._drop()

    def _lost(self) -> None:
        # The server ended the session: so may it have ended others', and this process
        # trusts no missing proof of life for a while (``ConnectionLosses``).
        self.db.losses.note()
        self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001, S110 - the session is gone either way
                pass


class LivenessOps:
    """A process's proof of life, where sessions can hold one."""

    db: Connections
    sql: Statements

    def proof_of_life(self, owner: str) -> ProofOfLife | None:
        """A proof of life for ``owner`` (not taken yet), or None where none can be held:
        SQLite, or PgBouncer without ``listen_url`` (leases alone say who is alive)."""
        if not self.db.holds_sessions:
            return None
        return ProofOfLife(self.db, self.sql, owner)

    def liveness_trusted(self, lease: float) -> bool:
        """A missing proof of life may mean its owner died: sessions hold locks here, and
        this process lost no store connection in the last ``lease`` seconds (had it, the
        server may have dropped live owners' sessions too)."""
        return self.db.holds_sessions and self.db.losses.quiet_for(lease)

    def find_gone_owners(self, lease_window: float) -> list[str]:
        """The owners of leases due within ``lease_window`` s whose proof of life no
        session holds: dead, or their connection dropped a moment ago."""
        if not self.db.holds_sessions:
            return []
        with self.db.read() as conn:
            rows = conn.execute(
                self.sql.liveness.find_gone_owners, params(lease_window=lease_window)
            ).all()
        return [row[0] for row in rows]

    def gone_owner_of_run(self, run_id: str, lease_window: float) -> str | None:
        """The owner of the run's lease (due within ``lease_window`` s) if no session holds
        its proof of life."""
        if not self.db.holds_sessions:
            return None
        with self.db.read() as conn:
            row = conn.execute(
                self.sql.liveness.find_gone_owner_of_run,
                params(run_id=run_id, lease_window=lease_window),
            ).first()
        return None if row is None else str(row[0])
