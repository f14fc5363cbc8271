"""The fault proxy holds and releases real TCP traffic (loopback only)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from faultproxy import TcpProxy


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield port
    server.close()


def test_passes_holds_and_releases(echo_port: int) -> None:
    with TcpProxy("127.0.0.1", echo_port) as proxy:
        conn = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        conn.sendall(b"one")
        assert conn.recv(16) == b"one"
        proxy.hold()
        time.sleep(0.1)
        conn.sendall(b"two")
        conn.settimeout(0.5)
        with pytest.raises(TimeoutError):
            conn.recv(16)
        proxy.release()
        conn.settimeout(5)
        assert conn.recv(16) == b"two"
        conn.close()


def test_delay_and_drop(echo_port: int) -> None:
    with TcpProxy("127.0.0.1", echo_port) as proxy:
        proxy.set_delay(0.3)
        conn = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        start = time.monotonic()
        conn.sendall(b"x")
        assert conn.recv(16) == b"x"
        assert time.monotonic() - start >= 0.6  # both directions delayed
        proxy.drop_connections()
        time.sleep(0.1)
        assert conn.recv(16) == b""
        conn.close()
