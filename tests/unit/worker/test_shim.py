"""The shim under ``leasehold run``: the command's tree lives and dies as one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leasehold.worker.run import _Child
from leasehold.worker.shim import descendants


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or going as it is read
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _read_pids(path: Path, count: int, child: _Child) -> list[int]:
    while True:  # the pytest timeout bounds this
        lines = path.read_text().split() if path.exists() else []
        if len(lines) >= count:
            return [int(line) for line in lines[:count]]
        assert not child.exited(), "the command ended before writing its pids"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("script", "returncode"),
    [("exit 0", 0), ("exit 75", 75), ("kill -TERM $$", -signal.SIGTERM)],
)
def test_the_shim_exits_as_the_command_did(script: str, returncode: int) -> None:
    child = _Child(["sh", "-c", script], dict(os.environ))
    assert child.start_error is None
    while not child.exited():  # reap() would kill a command still running
        time.sleep(0.01)
    assert child.reap() == returncode


def test_a_command_that_cannot_start_is_reported() -> None:
    child = _Child(["/nonexistent/command"], dict(os.environ))
    assert child.start_error is not None
    code, message = child.start_error
    assert code == 127
    assert "No such file or directory" in message
    assert child.reap() == 127


def test_what_the_command_leaves_behind_ends_with_it(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    child = _Child(
        ["sh", "-c", f'setsid sleep 300 & echo $! > "{pids}"; read _ < /dev/zero'],
        dict(os.environ),
    )
    [orphan] = _read_pids(pids, 1, child)
    assert _alive(orphan)
    child.reap()
    assert not _alive(orphan)
    assert not {child.pid, child.command_pid, orphan} & set(descendants(os.getpid()))


def test_the_tree_dies_when_its_wrapper_is_sigkilled(tmp_path: Path) -> None:
    """A stand-in wrapper starts the shim and is SIGKILLed; nothing of the tree survives."""
    pids = tmp_path / "pids"
    wrapper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time\n"
            "from leasehold.worker.run import _Child\n"
            "child = _Child(sys.argv[1:], dict(os.environ))\n"
            "time.sleep(300)\n",
            "sh",
            "-c",
            f'setsid sh -c \'echo $$ >> "{pids}"; sleep 300\' & echo $$ >> "{pids}"; sleep 300',
        ],
    )
    try:
        while len(pids.read_text().split() if pids.exists() else []) < 2:
            assert wrapper.poll() is None
            time.sleep(0.01)
        tree = [int(pid) for pid in pids.read_text().split()]
        assert all(_alive(pid) for pid in tree)
        wrapper.kill()
        wrapper.wait()
        while any(_alive(pid) for pid in tree):  # bounded by the pytest timeout
            time.sleep(0.01)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait()
