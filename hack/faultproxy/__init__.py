"""Test tooling: a TCP proxy that holds, delays and drops traffic, for fault injection.

Why this exists: to show that a worker whose requests hang stops its work
before its local deadline, and (later) that a target rejects a write that
arrives late, tests need to put a real network fault between a client and a
real server. This proxy runs in a background thread on a loopback port and
forwards bytes both ways; tests switch it between pass, hold (bytes are kept,
connections stay open, nothing is delivered until released), and delay.

It stands in for the network, so it lives outside the ``leasehold`` package.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType


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
        self.port = 0

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

    @property
    def url_host(self) -> str:
        """``host:port`` to give clients instead of the target's."""
        return f"{self._listen_host}:{self.port}"

    # -- forwarding --------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers.update({writer, up_writer})
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )
        self._writers.difference_update({writer, up_writer})

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                if self._delay_seconds:
                    await asyncio.sleep(self._delay_seconds)
                await self._open.wait()
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
