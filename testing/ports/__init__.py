"""Loopback ports for the servers tests start, handed out so no two collide.

A port found by binding port 0 and closing the socket is free only for a
moment, and it lies in the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 by default), from which every
outgoing connection also takes its local port. Between the pick and the
server's own bind, another test worker (or a connection to the API server) may
take it: CI once saw an operator's liveness endpoint fail with "address
already in use" while another process answered on that port.

`free_port` instead hands out ports below the ephemeral range, in turn, from a
counter shared by every process on the machine (a file under the temporary
directory, read and advanced under an exclusive ``flock``). A port comes round
again only after every other port of the range was handed out, and one that
is bound at that moment is skipped.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from pathlib import Path

FIRST_PORT = 20000
"""The lowest port handed out."""

LAST_PORT = 32000
"""The highest port handed out (below the default ephemeral range's 32768)."""

COUNTER_PATH = Path(tempfile.gettempdir()) / "leasehold-test-ports"
"""The counter every process shares: the next port to hand out, in decimal."""


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """Hand out a loopback port no other caller on this machine got recently.

    Returns:
        A TCP port in ``FIRST_PORT..LAST_PORT`` that was bindable on 127.0.0.1
        when handed out; the next ``LAST_PORT - FIRST_PORT`` calls on this
        machine, in any process, get other ports.

    Raises:
        OSError: the counter file cannot be opened, or no port of the range is
            bindable.
    """
    span = LAST_PORT - FIRST_PORT + 1
    fd = os.open(COUNTER_PATH, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        # A missing counter starts at a place that depends on the process, so
        # removing it mid-run does not send every process to one port.
        start = int(text) if text.isdigit() else FIRST_PORT + os.getpid() % span
        for step in range(span):
            port = FIRST_PORT + (start - FIRST_PORT + step) % span
            if _bindable(port):
                following = FIRST_PORT + (port - FIRST_PORT + 1) % span
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{following}\n".encode(), 0)
                return port
        raise OSError(f"no bindable loopback port in {FIRST_PORT}-{LAST_PORT}")
    finally:
        os.close(fd)  # closing the descriptor releases the lock
