"""A TCP proxy the chaos suite puts in front of Postgres and the broker, to cut them off.

Workers and the driver's producer side connect through it, so an outage is the proxy's
doing, not a stop of the shared service: ``cut()`` closes every connection and stops
listening (new connections are refused, as by a stopped server) until ``reopen()``.
``cut(crash=True)`` resets connections instead of closing them, and waits for a reply in
flight from the server (up to ``crash_wait`` seconds) so that the reply is dropped
mid-stream: the server may have committed what the client never hears about.

Example::

    proxy = TcpProxy("postgres", ("127.0.0.1", 5432)).start()
    url = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/test"
    proxy.cut(crash=True)      # like a crash: connections reset, replies lost, refused
    proxy.reopen()             # back: new connections reach the server again
    proxy.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

# Outside Linux's ephemeral range (32768-60999): no outgoing connection takes the port
# while the proxy is not listening, so it can listen on it again after an outage.
PORT_RANGE = (20000, 32000)


def free_port(rng: random.Random | None = None, tries: int = 200) -> int:
    """A port of ``PORT_RANGE`` nothing listens on right now."""
    rng = rng or random.Random()
    for _ in range(tries):
        port = rng.randrange(*PORT_RANGE)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORT_RANGE} after {tries} tries")


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0): buffered data is dropped, as in a crash."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Pair:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    done: bool = False

    def close(self, crash: bool) -> None:
        if self.done:
            return
        self.done = True
        for writer in (self.client, self.server):
            if crash:
                _reset(writer)
            else:
                writer.close()


@dataclass
class ProxyStats:
    accepted: int = 0
    refused_upstream: int = 0
    cuts: int = 0
    crash_cuts: int = 0
    replies_dropped: int = 0
    connections_cut: list[int] = field(default_factory=list)


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream``; runs its own event loop in a thread."""

    def __init__(self, name: str, upstream: tuple[str, int], port: int | None = None) -> None:
        self.name = name
        self.upstream = upstream
        self.port = port or free_port()
        self.stats = ProxyStats()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"proxy-{name}")
        self._thread.daemon = True
        self._server: asyncio.Server | None = None
        self._pairs: set[_Pair] = set()
        self._open = False
        self._crash: asyncio.Future[None] | None = None

    # -- control, from any thread -------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def cut(self, crash: bool = False, crash_wait: float = 1.0) -> int:
        """Stop listening and drop every connection; returns how many were cut."""
        return self._call(self._cut(crash, crash_wait), timeout=crash_wait + 10)

    def reopen(self) -> None:
        self._call(self._listen())

    @property
    def is_open(self) -> bool:
        return self._open

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self._cut(False, 0.0))
            self._call(self._cancel_tasks())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, int], timeout: float = 10.0) -> int:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    # -- the event loop's side ---------------------------------------------------------------

    async def _listen(self) -> int:
        if self._server is not None:
            return 0
        last: OSError | None = None
        for _ in range(40):  # the port was ours a moment ago; allow a short grace
            try:
                self._server = await asyncio.start_server(
                    self._accept, "127.0.0.1", self.port, reuse_address=True, backlog=256
                )
                self._open = True
                return 0
            except OSError as exc:
                last = exc
                await asyncio.sleep(0.05)
        raise RuntimeError(f"proxy {self.name}: cannot listen on {self.port} again: {last}")

    async def _cancel_tasks(self) -> int:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    async def _cut(self, crash: bool, crash_wait: float) -> int:
        self._open = False
        if self._server is not None:
            self._server.close()
            self._server = None
        if crash and self._pairs and crash_wait > 0:
            # Wait for a server reply in flight, drop it, then reset everything.
            self._crash = self._loop.create_future()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._crash), crash_wait)
            self._crash = None
        pairs = list(self._pairs)
        for pair in pairs:
            pair.close(crash)
        self._pairs.clear()
        self.stats.cuts += 1
        self.stats.crash_cuts += int(crash)
        self.stats.connections_cut.append(len(pairs))
        return len(pairs)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._open:
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.upstream), 5
            )
        except (OSError, asyncio.TimeoutError):
            self.stats.refused_upstream += 1
            _reset(writer)
            return
        pair = _Pair(writer, up_writer)
        if not self._open:  # cut while we connected upstream
            pair.close(crash=True)
            return
        self.stats.accepted += 1
        self._pairs.add(pair)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, pair, from_server=False),
                self._pump(up_reader, writer, pair, from_server=True),
            )
        finally:
            self._pairs.discard(pair)

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        pair: _Pair,
        from_server: bool,
    ) -> None:
        try:
            while not pair.done:
                data = await src.read(65536)
                if not data:
                    break
                if from_server and self._crash is not None and not self._crash.done():
                    self.stats.replies_dropped += 1
                    self._crash.set_result(None)  # this reply never reaches the client
                    return
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if self._crash is None:
                pair.close(crash=False)
