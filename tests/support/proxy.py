"""A TCP forwarder a test owns, to take a service away and give it back (a restart).

Only the test's own clients go through it: other people's sessions on the same Postgres
never notice.

Example::

    with TcpProxy("127.0.0.1", 5432) as proxy:
        url = proxy.url(PG_URL)           # the same database, through the proxy
        proxy.cut()                       # every connection reset, new ones too
        wait_until(lambda: proxy.refused) # a client tried while it was down
        proxy.restore()                   # forwarding again
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType

from sqlalchemy.engine import make_url


class TcpProxy:
    """Forwards 127.0.0.1:<free port> to ``target``; ``cut()`` and ``restore()`` it.

    While cut, every connection is reset as soon as it is accepted (the client sees the
    server go away, as in a restart) and counted in ``refused``, so a test can wait until
    its client really tried during the outage.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.refused = 0
        self._cut = False
        # Cleared by freeze(): bytes stop moving, both sockets stay open (a network cut).
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    @classmethod
    def to_url(cls, url: str) -> TcpProxy:
        """A proxy to the host and port of a SQLAlchemy URL."""
        parsed = make_url(url)
        return cls(parsed.host or "127.0.0.1", parsed.port or 5432)

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parsed = make_url(url).set(host="127.0.0.1", port=self.port)
        return parsed.render_as_string(hide_password=False)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # close()
            with self._lock:
                if self._cut:
                    self.refused += 1
                    _abort(client)
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _abort(client)
                continue
            with self._lock:
                if self._cut:  # cut while connecting
                    self.refused += 1
                    _abort(client)
                    _abort(upstream)
                    continue
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._sockets.difference_update((source, sink))
            _abort(source)
            _abort(sink)

    def cut(self) -> None:
        """Reset every connection and every new one, like a server that went down."""
        with self._lock:
            self._cut = True
            self.refused = 0
            doomed = list(self._sockets)
            self._sockets.clear()
        for sock in doomed:
            _abort(sock)

    def freeze(self) -> None:
        """Stop forwarding, keeping every socket open: a host cut off by the network, whose
        peers' kernels still answer TCP keepalive, so no side sees the connection end."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def restore(self) -> None:
        """Forward new connections again."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self.thaw()
        self.cut()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        self._listener.close()

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
