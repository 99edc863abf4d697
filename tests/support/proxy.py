"""A TCP forwarder a test owns, to take a service away and give it back (a restart).

Only the test's own clients go through it: other people's sessions on the same Postgres
never notice.

Example::

    with TcpProxy("127.0.0.1", 5432) as proxy:
        url = proxy.url(PG_URL)           # the same database, through the proxy
        proxy.cut()                       # every connection closed, new ones refused
        proxy.restore()                   # accepting again, on the same port
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from types import TracebackType

from sqlalchemy.engine import make_url


class TcpProxy:
    """Forwards 127.0.0.1:<free port> to ``target``; ``cut()`` and ``restore()`` it."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0
        self._listen()

    @classmethod
    def to_url(cls, url: str) -> TcpProxy:
        """A proxy to the host and port of a SQLAlchemy URL."""
        parsed = make_url(url)
        return cls(parsed.host or "127.0.0.1", parsed.port or 5432)

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parsed = make_url(url).set(host="127.0.0.1", port=self.port)
        return parsed.render_as_string(hide_password=False)

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 10
        while True:
            try:
                listener.bind(("127.0.0.1", self.port))
                break
            except OSError:  # the port of a cut proxy, briefly still held
                if not self.port or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed: cut() or close()
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _abort(client)
                continue
            with self._lock:
                if self._listener is not listener:  # cut while connecting
                    _abort(client)
                    _abort(upstream)
                    return
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with self._lock:
                    self._sockets.discard(sock)
                _abort(sock)

    def cut(self) -> None:
        """Close every connection (with a reset) and refuse new ones, like a server down."""
        with self._lock:
            listener, self._listener = self._listener, None
            doomed = list(self._sockets)
            self._sockets.clear()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            listener.close()
        for sock in doomed:
            _abort(sock)

    def restore(self) -> None:
        """Accept connections again, on the same port."""
        if self._listener is None:
            self._listen()

    def close(self) -> None:
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _abort(sock: socket.socket) -> None:
    """Close at once (a reset): the peer sees the connection die, and a thread blocked in
    ``recv`` on it wakes up (``shutdown`` does that; ``close`` alone would not)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
