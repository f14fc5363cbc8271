"""Test tooling: a TCP proxy that holds, delays and drops traffic, for fault injection.

Why this exists: to show that a worker whose requests hang stops its work
before its local deadline, and (later) that a target rejects a write that
arrives late, tests need to put a real network fault between a client and a
real server. This proxy runs in a background thread on a loopback port and
forwards bytes both ways; tests switch it between pass, hold (bytes are kept,
connections stay open, nothing is delivered until released), delay, and
blackhole (bytes are dropped for good, connections stay open: every request
hangs, as through a half-open connection). For an API server's rolling
restart, :meth:`TcpProxy.retarget` sends new connections to another server
while :meth:`TcpProxy.strand` leaves the open ones half-open.

It stands in for the network, so it lives outside the ``leasehold`` package.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from types import TracebackType


@dataclass(eq=False)
class _Connection:
    """One accepted connection; once stranded, its bytes are dropped both ways."""

    stranded: bool = False


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target_host:target_port``.

    Args:
        target_host: where to forward to.
        target_port: the target's port.
        listen_host: loopback address to listen on.

    Use as a context manager or call :meth:`start` / :meth:`stop`.
    """

    def __init__(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1") -> None:
        self._target = (target_host, target_port)
        self._listen_host = listen_host
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._open = asyncio.Event()
        self._delay_seconds = 0.0
        self._writers: set[asyncio.StreamWriter] = set()
        self._connections: set[_Connection] = set()
        self._blackholed = False
        self.port = 0
        self.accepted = 0
        """Connections accepted so far (a client that retries on a new connection adds one)."""

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> TcpProxy:
        """Start listening; :attr:`port` is set on return.

        Returns:
            The proxy itself.
        """
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(timeout=10)
        return self

    async def _start(self) -> None:
        self._open.set()
        self._server = await asyncio.start_server(self._accept, self._listen_host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        """Close every connection and stop the proxy thread."""
        if not self._thread.is_alive():
            return

        async def _stop() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            self._open.set()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- faults ----------------------------------------------------------------

    def hold(self) -> None:
        """Hold all traffic: bytes are read and kept, nothing is delivered."""
        self._loop.call_soon_threadsafe(self._open.clear)

    def release(self) -> None:
        """Deliver what was held and pass traffic again."""
        self._loop.call_soon_threadsafe(self._open.set)

    def set_delay(self, seconds: float) -> None:
        """Delay every chunk by ``seconds`` before delivering it (0 for none).

        Args:
            seconds: the added one-way latency.
        """
        self._delay_seconds = max(0.0, seconds)

    def drop_connections(self) -> None:
        """Close every open connection (both sides see a reset/EOF)."""

        def _drop() -> None:
            for writer in list(self._writers):
                writer.close()

        self._loop.call_soon_threadsafe(_drop)

    def blackhole(self) -> None:
        """Drop every byte, of open and new connections, and close nothing (until :meth:`restore`).

        Clients see requests that never get an answer and connections that
        never fail: a server gone without a FIN or RST.
        """

        def _blackhole() -> None:
            self._blackholed = True
            for connection in self._connections:
                connection.stranded = True

        self._loop.call_soon_threadsafe(_blackhole)

    def restore(self) -> None:
        """New connections pass again (connections already stranded stay so)."""

        def _restore() -> None:
            self._blackholed = False

        self._loop.call_soon_threadsafe(_restore)

    def strand(self) -> None:
        """Leave every open connection half-open: its bytes are dropped from now on."""

        def _strand() -> None:
            for connection in self._connections:
                connection.stranded = True

        self._loop.call_soon_threadsafe(_strand)

    def retarget(self, target_host: str, target_port: int) -> None:
        """Forward new connections to ``target_host:target_port`` (open ones keep theirs)."""

        def _retarget() -> None:
            self._target = (target_host, target_port)

        self._loop.call_soon_threadsafe(_retarget)

    @property
    def url_host(self) -> str:
        """``host:port`` to give clients instead of the target's."""
        return f"{self._listen_host}:{self.port}"

    # -- forwarding --------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        connection = _Connection(stranded=self._blackholed)
        self._connections.add(connection)
        self._writers.add(writer)
        try:
            if connection.stranded:  # no server behind it: swallow until the client gives up
                await self._pipe(reader, writer, connection, to_client=False)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self._target)
            except OSError:
                writer.close()
                return
            self._writers.add(up_writer)
            await asyncio.gather(
                self._pipe(reader, up_writer, connection, to_client=False),
                self._pipe(up_reader, writer, connection, to_client=True),
                return_exceptions=True,
            )
            self._writers.discard(up_writer)
        finally:
            self._writers.discard(writer)
            self._connections.discard(connection)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: _Connection,
        *,
        to_client: bool,
    ) -> None:
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                if connection.stranded:
                    continue
                if self._delay_seconds:
                    await asyncio.sleep(self._delay_seconds)
                await self._open.wait()
                if connection.stranded:
                    continue
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # A stranded connection stays open on the client's side even when
            # its server goes: that is what makes it half-open.
            if not (connection.stranded and to_client):
                with contextlib.suppress(Exception):
                    writer.close()
