"""Start and stop component processes, each in its own process group.

A process started here runs in a new session, so it survives the end of the
command that started it (``python -m localcluster up`` detaches this way) and
a Ctrl-C in the terminal does not reach it. Stopping sends SIGTERM to the
whole group, waits, then SIGKILL.

A process may also be tied to its parent: with ``stop_with_parent`` the
kernel sends it SIGTERM when the thread that started it dies (Linux
``PR_SET_PDEATHSIG``), so a test run killed with SIGKILL leaks no etcd.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1


@dataclass
class Process:
    """A component process, started here or found again through its pid.

    Attributes:
        name: Component name.
        pid: Process id; also the process group id (the process leads its group).
        binary: Absolute path of the executable, to recognise the pid again.
        log: Log file that receives stdout and stderr.
        popen: The child handle when this process started it, else None.
    """

    name: str
    pid: int
    binary: Path
    log: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def exit_code(self) -> int | None:
        """Return the exit code of a child that has ended, else None.

        Returns:
            The exit code (negative for a signal), or None while running or
            when the process is not a child of this one.
        """
        return None if self.popen is None else self.popen.poll()

    def running(self) -> bool:
        """Tell whether the process still runs (and is still the same program).

        Returns:
            True while it runs.
        """
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_runs(self.pid, self.binary)

    def wait_gone(self, timeout: float) -> bool:
        """Wait until the process has ended.

        Args:
            timeout: Seconds to wait at most.

        Returns:
            True if it ended in time.
        """
        deadline = time.monotonic() + timeout
        while self.running():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True


def signal_group(process: Process, signum: int) -> None:
    """Send a signal to the process group of a running process.

    Nothing is sent when the pid no longer runs the recorded binary, so a
    stale record never hits an unrelated process that reused the pid.

    Args:
        process: The process; its pid is its group id.
        signum: Signal number.
    """
    if not process.running():
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def stop_all(waves: Sequence[Sequence[Process]], grace: float = 10.0) -> None:
    """Stop processes wave by wave: SIGTERM a wave, wait, SIGKILL stragglers.

    Waves run in order so that clients stop before the servers they talk to
    (scheduler and controller manager, then API server, then etcd), which
    keeps the logs free of connection errors at shutdown.

    Args:
        waves: Groups of processes; each group is stopped together.
        grace: Seconds each wave gets after SIGTERM before SIGKILL.
    """
    for wave in waves:
        for process in wave:
            signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in wave:
            if not process.wait_gone(max(0.0, deadline - time.monotonic())):
                signal_group(process, signal.SIGKILL)
                process.wait_gone(5.0)


def _parent_death_hook() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    # Load libc before the fork: the child only makes one system call.
    libc = ctypes.CDLL(libc_name, use_errno=True)
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


def spawn(
    name: str,
    binary: Path,
    args: Sequence[str],
    log: Path,
    *,
    cwd: Path,
    stop_with_parent: bool = False,
) -> Process:
    """Start a component in a new session with output to its log file.

    Args:
        name: Component name.
        binary: Executable to run.
        args: Its flags.
        log: Log file; truncated first.
        cwd: Working directory of the process.
        stop_with_parent: Ask the kernel to SIGTERM it when this thread dies
            (Linux only; ignored elsewhere).

    Returns:
        The started process.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_parent_death_hook() if stop_with_parent else None,
        )
    return Process(name=name, pid=popen.pid, binary=binary, log=log, popen=popen)


def pid_runs(pid: int, binary: Path) -> bool:
    """Tell whether ``pid`` is alive and runs ``binary``.

    Where ``/proc`` exists the command line is compared, which guards against
    pid reuse after a reboot or a long pause; elsewhere liveness is enough.

    Args:
        pid: Process id.
        binary: Expected executable.

    Returns:
        True when the process is alive (not a zombie) and matches.
    """
    proc = Path("/proc") / str(pid)
    if Path("/proc/self").exists():
        try:
            argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0]
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state != "Z" and os.fsdecode(argv0) == str(binary)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tail(path: Path, lines: int = 40) -> str:
    """Return the last lines of a text file, or an empty string if unreadable.

    Args:
        path: The file.
        lines: How many lines.

    Returns:
        Those lines, joined with newlines.
    """
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
