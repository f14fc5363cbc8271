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


def test_blackhole_swallows_bytes_and_keeps_connections_open(echo_port: int) -> None:
    with TcpProxy("127.0.0.1", echo_port) as proxy:
        old = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        old.sendall(b"one")
        assert old.recv(16) == b"one"
        proxy.blackhole()
        time.sleep(0.1)
        new = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        for conn in (old, new):
            conn.sendall(b"lost")
            conn.settimeout(0.5)
            with pytest.raises(TimeoutError):  # no answer, and no EOF either
                conn.recv(16)
        old.close()  # the echo server serves one connection at a time
        new.close()
        proxy.restore()
        time.sleep(0.1)
        fresh = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        fresh.sendall(b"back")
        assert fresh.recv(16) == b"back"
        fresh.close()


def test_retarget_and_strand_model_a_rolling_restart(echo_port: int) -> None:
    other = socket.create_server(("127.0.0.1", 0))
    other_port = other.getsockname()[1]

    def shout() -> None:  # a second server that answers in upper case
        while True:
            try:
                conn, _ = other.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data.upper())

    threading.Thread(target=shout, daemon=True).start()
    try:
        with TcpProxy("127.0.0.1", echo_port) as proxy:
            old = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            old.sendall(b"a")
            assert old.recv(16) == b"a"
            proxy.strand()
            proxy.retarget("127.0.0.1", other_port)
            time.sleep(0.1)
            old.sendall(b"b")
            old.settimeout(0.5)
            with pytest.raises(TimeoutError):  # half-open: neither answer nor EOF
                old.recv(16)
            new = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            new.sendall(b"c")
            assert new.recv(16) == b"C"
            old.close()
            new.close()
    finally:
        other.close()
