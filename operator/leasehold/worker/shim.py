"""The process between ``leasehold run`` and its command: it takes the command's tree down.

Why this module exists: the wrapper must be able to die (even by ``SIGKILL``,
which it cannot catch) without leaving its command, or anything the command
started, writing under a lease it no longer renews. The kernel offers no way
to kill a whole process tree when one process dies, so this small process
does it. The wrapper runs it as its child (``python -I -S shim.py WATCH_FD
REPORT_FD -- CMD ARGS...``, no package imports, a few ms); it:

* becomes a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): every
  descendant of the command that is orphaned (double fork, ``setsid``
  daemons) is re-parented to it, so none leaves its subtree;
* starts the command in its own process group (the wrapper signals that
  group) with ``PR_SET_PDEATHSIG`` = ``SIGKILL``, so the command dies if the
  shim is killed on its own;
* reports ``ok PID`` (or ``error CODE MESSAGE`` when the command cannot be
  started) on ``REPORT_FD``;
* watches ``WATCH_FD``, the read end of a pipe whose only write end the
  wrapper holds: end of file means the wrapper is gone (or asks for the tree
  to be killed) — it then ``SIGKILL``s every descendant, reaps them, and
  exits;
* when the command exits, kills what it left behind, and exits the way the
  command did (same code, or killed by the same signal), so the wrapper sees
  the command's own status.

``SIGTERM``/``SIGINT``/``SIGHUP`` that reach the shim (the wrapper forwards
them to the group) are left to the command. Off Linux (no subreaper, no
``/proc``) only the command itself is killed with the wrapper.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
EXIT_SHIM_USAGE = 2


_PRCTL: list[Callable[[int, int], int] | None] = []
"""The one ``prctl`` found (a one-element cache, filled on first use)."""


def _find_prctl() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The interpreter's own symbols: libc is linked in (glibc and musl), so
        # no search is needed. ``find_library`` runs ``ldconfig -p`` in a
        # subprocess (9 ms on an idle machine, far more under load), which the
        # start of every command paid three times, once inside the command's
        # own pre-exec hook.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl  # noqa: B018 - raises AttributeError when not linked in
    except (OSError, AttributeError):
        name = ctypes.util.find_library("c")
        if name is None:
            return None
        libc = ctypes.CDLL(name, use_errno=True)

    def prctl(option: int, arg: int) -> int:
        return int(libc.prctl(option, arg, 0, 0, 0))

    return prctl


def _prctl() -> Callable[[int, int], int] | None:
    """``prctl(option, arg)`` from libc, or ``None`` off Linux; looked up once per process."""
    if not _PRCTL:
        _PRCTL.append(_find_prctl())
    return _PRCTL[0]


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux); orphaned descendants come to it.

    Returns:
        Whether it worked (``False`` off Linux).
    """
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1) == 0


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root``, read from ``/proc`` (parents first).

    Args:
        root: a process id.

    Returns:
        The descendants' pids; empty without ``/proc``.
    """
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(root: int, known: Sequence[int] = ()) -> None:
    """``SIGKILL`` every descendant of ``root`` (this process), reaping until none is left.

    ``root`` must be a subreaper, so that every process of the tree ends up
    its child and is reaped here; a process forked while the tree is being
    killed is found at the next pass. Without ``/proc`` (not Linux) only
    ``known`` (its own children) are killed.

    Args:
        root: this process's pid.
        known: children of this process to kill even if ``/proc`` does not
            list them.
    """
    unreaped = set(known)
    while True:
        for pid in {*descendants(root), *unreaped}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            reaped, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        unreaped.discard(reaped)


def _child_setup() -> None:
    """In the command's process, before exec: die with the shim."""
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the shim died before the line above
        os.kill(os.getpid(), signal.SIGKILL)


def _ignore(signum: int, frame: object) -> None:
    """A handler, not ``SIG_IGN``: the command gets default dispositions at exec."""


def _exit_like(returncode: int) -> None:
    """Exit as the command did: same code, or killed by the same signal."""
    if returncode >= 0:
        os._exit(returncode)
    signum = -returncode
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(OSError, ValueError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def _report(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, line.encode("utf-8", "replace"))
    with contextlib.suppress(OSError):
        os.close(fd)


def run(watch_fd: int, report_fd: int, command: Sequence[str]) -> None:
    """Start ``command``, take its tree down with it or with the wrapper; never returns.

    Args:
        watch_fd: read end of the wrapper's pipe (end of file: kill the tree).
        report_fd: where ``ok PID`` or ``error CODE MESSAGE`` goes.
        command: the program and its arguments.
    """
    me = os.getpid()
    become_subreaper()  # also finds prctl, before the fork: the command's hook reuses it
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, _ignore)
    try:
        process = subprocess.Popen(list(command), preexec_fn=_child_setup)  # one thread here
    except OSError as exc:
        code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
        _report(report_fd, f"error {code} {exc}")
        os._exit(code)
    _report(report_fd, f"ok {process.pid}")
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid, status = 0, 0
        if pid == process.pid:
            kill_tree(me)  # what the command left behind ends with it (reaped: not known)
            _exit_like(os.waitstatus_to_exitcode(status))
        if pid != 0:
            continue  # an orphan re-parented here; reaped
        try:
            ready, _, _ = select.select([watch_fd, wake_read], [], [], 1.0)
        except InterruptedError:
            continue
        if wake_read in ready:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                os.read(wake_read, 512)
        if watch_fd in ready:
            try:
                data = os.read(watch_fd, 512)
            except InterruptedError:
                continue
            if not data:  # the wrapper is gone, or asks for the end
                kill_tree(me, [process.pid])
                _exit_like(-signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> None:
    """``shim.py WATCH_FD REPORT_FD -- CMD ARGS...``; never returns.

    Args:
        argv: the arguments after the script's name (default ``sys.argv[1:]``).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[2] != "--" or not args[0].isdigit() or not args[1].isdigit():
        sys.stderr.write("usage: shim.py WATCH_FD REPORT_FD -- CMD ARGS...\n")
        os._exit(EXIT_SHIM_USAGE)
    run(int(args[0]), int(args[1]), args[3:])


if __name__ == "__main__":
    main()
