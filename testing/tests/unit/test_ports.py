"""`ports.free_port`: ports handed out across processes never repeat soon, skip bound ones."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

import ports


def test_ports_from_several_processes_are_distinct_and_below_the_ephemeral_range(
    tmp_path: Path,
) -> None:
    counter = tmp_path / "counter"
    script = (
        "import ports, pathlib, sys\n"
        f"ports.COUNTER_PATH = pathlib.Path({str(counter)!r})\n"
        "print(' '.join(str(ports.free_port()) for _ in range(200)))\n"
    )
    testing_dir = Path(ports.__file__).resolve().parent.parent
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            text=True,
            env={"PYTHONPATH": str(testing_dir)},
        )
        for _ in range(4)
    ]
    handed_out = [int(p) for child in children for p in child.communicate()[0].split()]
    assert len(handed_out) == 800
    assert len(set(handed_out)) == 800
    low, _high = (
        int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    )
    assert all(ports.FIRST_PORT <= p <= ports.LAST_PORT < low for p in handed_out)


def test_a_bound_port_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = tmp_path / "counter"
    monkeypatch.setattr(ports, "COUNTER_PATH", counter)
    counter.write_text("25000\n")
    first = ports.free_port()
    assert first < ports.LAST_PORT - 3
    with socket.create_server(("127.0.0.1", first + 1)):
        counter.write_text(f"{first + 1}\n")
        assert ports.free_port() == first + 2
    assert ports.free_port() == first + 3
