"""``leasehold run -- CMD ARGS...``: run any program under the pod's lease.

Why this module exists: workers written in any language get the lease's
guarantees without an SDK. The wrapper holds the lease the operator claimed
for the pod (:meth:`LeaseHolder.from_env`), renews it, runs the command as a
child, and:

* when the lease is lost (a renewal is refused, or the local deadline comes
  close without a successful renewal) it stops the child **before** the
  local deadline: ``SIGTERM`` to the command's process group, then
  ``SIGKILL`` to the command and all its descendants after the grace period,
  never later than just before the deadline; then exits with
  :data:`EXIT_LEASE_LOST` (75, ``EX_TEMPFAIL``) after a ``lease lost: ...``
  line on stderr;
* when the child exits on its own it records the completion (``Succeeded``
  for exit code 0, else ``Failed`` with ``exit code N``) and exits with the
  child's code; a refused completion (the lease was taken meanwhile) exits 75.
  75 is the wrapper's own verdict: a command that exits 75 itself while the
  lease was held is recorded as ``Failed`` with exit code 75, and the wrapper
  exits 1;
* ``SIGTERM``/``SIGINT`` sent to the wrapper are forwarded to the child's
  process group; a child that then exits is not the job's outcome (the pod
  is being stopped), so the lease is released for the next attempt instead
  of completed. A signal that arrives after the child exited does not
  change its outcome (a success racing a stop is recorded), nor does one
  handled while the wrapper was starting the child, if the child has ended by
  the time the wrapper knows it (the signal was never forwarded); one that
  arrives before the child started stops the wrapper without starting it.

The command and everything it starts die with the wrapper, even when the
wrapper is ``SIGKILL``ed: a small process between them (:mod:`.shim`, a child
subreaper) kills the whole tree when the wrapper's pipe to it closes, which
the kernel does when the wrapper dies. Processes the command leaves behind
are killed when it ends: the lease ends with the command, as a container's
processes end with its main process.

The child gets the wrapper's environment, including
``LEASEHOLD_FENCING_TOKEN``, which it must send with every effect so fenced
targets can reject it once a newer holder exists.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Final

from leasehold.lease.errors import StoreError
from leasehold.lease.leaseops import Rejected
from leasehold.lease.protocol import Outcome
from leasehold.lease.waits import wait_for_event
from leasehold.names import ENV_FENCING_TOKEN
from leasehold.worker import shim
from leasehold.worker.errors import LeaseEnvironmentError, LeaseLost
from leasehold.worker.holder import LeaseHolder
from leasehold.worker.startup import StartupClock
from leasehold.worker.timing import LeaseTiming

log = logging.getLogger("leasehold.worker.run")

EXIT_LEASE_LOST: Final = 75
"""Exit code when the lease was lost or the completion refused (``EX_TEMPFAIL``)."""
EXIT_USAGE: Final = 2
"""Exit code for a bad command line or lease environment."""
EXIT_COMMAND_FAILED: Final = 1
"""Exit code when the command itself exited 75 (recorded as such) but the lease was held."""
EXIT_NOT_EXECUTABLE: Final = shim.EXIT_NOT_EXECUTABLE
EXIT_NOT_FOUND: Final = shim.EXIT_NOT_FOUND
SHIM_PATH: Final = Path(shim.__file__)
"""The shim script, run by path so that it imports nothing of the package."""
SHIM_EXIT_SECONDS: Final = 1.0
"""How long the shim gets to kill the tree before its group gets ``SIGKILL``."""

DEFAULT_GRACE_SECONDS: Final = 5.0
POLL_SECONDS: Final = 0.05
"""How often the wrapper looks at the child while nothing happens."""
KILL_ALLOWANCE_SECONDS: Final = 0.5
"""The kill starts this long before the local deadline, so that the command is
dead and reaped (not merely signalled) when the deadline comes: the shim must
be scheduled to kill the tree and exit. On a CI machine running three test
workers on two cores that took 0.14-0.31 s; 0.1 s fell short. If the shim has
not exited halfway through, the wrapper sends the group ``SIGKILL`` itself
(on a machine at load 10 the shim took 0.7-0.9 s, past the deadline)."""

FORWARDED_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


def term_lead_seconds(timing: LeaseTiming, grace_seconds: float) -> float:
    """How long before the local deadline ``SIGTERM`` goes out without a renewal.

    The child must be dead by the deadline, so the wrapper sends ``SIGTERM``
    when ``remaining_seconds() <= lead`` and ``SIGKILL`` just before the
    deadline (:data:`KILL_ALLOWANCE_SECONDS`).
    The lead is the grace period, but at most half the slack a healthy
    holder keeps (``window - renew interval``): a renewal that is merely due
    must not get the child killed.

    Args:
        timing: the lease's timing.
        grace_seconds: the requested grace period (seconds, >= 0).

    Returns:
        The lead in seconds (``>= 0``).
    """
    slack = timing.window_seconds - timing.renew_interval_seconds
    return max(0.0, min(grace_seconds, slack / 2))


def _exit_code(returncode: int) -> int:
    """A shell-style exit code: the code, or 128 + N when killed by signal N."""
    return returncode if returncode >= 0 else 128 - returncode


def _describe(returncode: int) -> str:
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"killed by {name}"


class _Child:
    """The command under the shim; signals go to the shim's process group.

    The shim (:mod:`.shim`) leads the group, the command runs in it. The
    wrapper holds the only write end of the shim's watch pipe: closing it
    (:meth:`kill_tree`, or the kernel when the wrapper dies) makes the shim
    ``SIGKILL`` the command and all its descendants.

    Attributes:
        pid: the shim's pid (and process group id).
        command_pid: the command's pid, ``None`` when it could not start.
        start_error: ``(exit code, message)`` when the command could not start.
    """

    def __init__(self, command: Sequence[str], env: dict[str, str]) -> None:
        watch_read, watch_write = os.pipe()
        self._watch: int | None = watch_write
        report_read, report_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(SHIM_PATH),
                    str(watch_read),
                    str(report_write),
                    "--",
                    *command,
                ],
                env=env,
                process_group=0,
                pass_fds=(watch_read, report_write),
            )
        except BaseException:
            os.close(report_read)
            self._close_watch()
            raise
        finally:
            os.close(watch_read)
            os.close(report_write)
        self.pid = self.process.pid
        self._reaped = False
        with os.fdopen(report_read, "rb") as reader:
            report = reader.read().decode("utf-8", "replace")
        self.command_pid: int | None = None
        self.start_error: tuple[int, str] | None = None
        kind, _, rest = report.partition(" ")
        if kind == "ok" and rest.strip().isdigit():
            self.command_pid = int(rest)
        elif kind == "error":
            code, _, message = rest.partition(" ")
            self.start_error = (int(code) if code.isdigit() else EXIT_NOT_EXECUTABLE, message)
        else:
            self.start_error = (EXIT_NOT_EXECUTABLE, f"the shim failed ({report!r})")

    def _close_watch(self) -> None:
        if self._watch is not None:
            with contextlib.suppress(OSError):
                os.close(self._watch)
            self._watch = None

    def exited(self) -> bool:
        """Whether the shim exited, without reaping it (its group id stays valid)."""
        if self._reaped:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def command_ended(self) -> bool:
        """Whether the command itself ended, though the shim may still be sweeping its tree.

        Read from ``/proc``: the command's pid is gone, a zombie, or no longer
        the shim's child. Off Linux (no ``/proc``) only :meth:`exited` knows.
        """
        if self.command_pid is None:
            return True
        if not os.path.isdir("/proc/self"):
            return self.exited()
        try:
            stat = Path(f"/proc/{self.command_pid}/stat").read_bytes()
        except OSError:
            return True
        fields = stat.rsplit(b")", 1)[1].split()
        return fields[0] in (b"Z", b"X") or int(fields[1]) != self.pid

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the command's process group (gone already: nothing)."""
        if self._reaped:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def kill_tree(self, by: float | None = None) -> None:
        """Have the shim ``SIGKILL`` the command and all its descendants; wait for it.

        The group gets ``SIGKILL`` from here if the shim does not exit within
        :data:`SHIM_EXIT_SECONDS` (it is stopped, was killed itself, or is not
        scheduled on a busy node), or by ``by``, whichever comes first.

        Args:
            by: a ``time.monotonic()`` instant by which the tree must be
                signalled whatever the shim does (a local deadline's kill);
                ``None``: only :data:`SHIM_EXIT_SECONDS` bounds the wait.
        """
        self._close_watch()
        deadline = time.monotonic() + SHIM_EXIT_SECONDS
        if by is not None:
            deadline = min(deadline, by)
        while not self.exited() and time.monotonic() < deadline:
            time.sleep(0.002)
        if not self.exited():
            self.signal_group(signal.SIGKILL)

    def reap(self, by: float | None = None) -> int:
        """Kill what is left of the command's tree, reap the shim, return its returncode.

        The returncode is the command's: the shim exits as the command did.

        Args:
            by: as for :meth:`kill_tree`.
        """
        self.kill_tree(by)
        returncode = self.process.wait()
        self._reaped = True
        return returncode


class _Runner:
    """One ``leasehold run``: the holder, the child, and the signal forwarding."""

    def __init__(
        self,
        holder: LeaseHolder,
        grace_seconds: float,
        received: Sequence[int] = (),
        startup: StartupClock | None = None,
    ) -> None:
        self.holder = holder
        self.startup = startup
        self.grace = max(0.0, grace_seconds)
        self.lead = term_lead_seconds(holder.timing, self.grace)
        self.received = received
        self.pending: int | None = None
        """A stop signal handled before the child was known: sent to nothing yet."""
        self.forwarded: int | None = None
        """A stop signal sent to the child's process group."""
        self.after_exit: int | None = None
        self.child: _Child | None = None
        self._completed = False

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        child = self.child
        if child is None:  # not started, or not known yet: run() decides
            self.pending = signum
            return
        if child.exited() or child.command_ended():
            # The child ended on its own first: its outcome stands.
            self.after_exit = signum
            return
        self.forwarded = signum
        log.info("forwarding %s to the command", signal.Signals(signum).name)
        child.signal_group(signum)

    def run(self, command: Sequence[str]) -> int:
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():  # else: cannot forward
            for signum in FORWARDED_SIGNALS:
                previous[signum] = signal.signal(signum, self._forward)
        if self.received and self.pending is None:
            self.pending = self.received[0]  # arrived before the handlers above
        try:
            if self.pending is not None:
                return self._stopped_before_start()
            try:
                self.holder.start()
            except LeaseLost as loss:
                log.error("lease lost: %s (the command was not started)", loss)
                return EXIT_LEASE_LOST
            if self.startup is not None:
                self.startup.mark("confirm")
                for name, value in self.holder.confirm_requests.items():
                    self.startup.count(name, value)
            if self.pending is not None:
                return self._stopped_before_start()
            try:
                self.holder.check()  # the window may have closed since start() (a starved thread)
            except LeaseLost as loss:
                log.error("lease lost: %s (the command was not started)", loss)
                return EXIT_LEASE_LOST
            # start() times the window by the lease's own duration: so must the lead.
            self.lead = term_lead_seconds(self.holder.timing, self.grace)
            env = dict(os.environ)
            env[ENV_FENCING_TOKEN] = str(self.holder.token)
            self.child = _Child(command, env)
            if self.child.start_error is not None:
                code, error = self.child.start_error
                self.child.reap()
                log.error("cannot start %s: %s", command[0], error)
                return self._complete(code, f"exit code {code}: cannot start {command[0]}: {error}")
            log.info(
                "started %s as pid %s (fencing token %s)",
                command,
                self.child.command_pid,
                self.holder.token,
            )
            if self.startup is not None:
                self.startup.mark("child")
                log.info("%s", self.startup.line())
            # A signal handled while the child was starting (the handler now
            # forwards on its own): forward it now, unless the command has ended
            # meanwhile (the wrapper was descheduled while starting it): it was
            # never sent, so the command ended on its own and its outcome stands.
            pending, self.pending = self.pending, None
            if pending is not None and self.forwarded is None and self.after_exit is None:
                self._forward(pending, None)
            return self._supervise(self.child)
        finally:
            if self.child is not None and not self.child.exited():
                self.child.reap()  # an error above: the command must not outlive us
            for forwarded, handler in previous.items():
                signal.signal(forwarded, handler)

    def _stopped_before_start(self) -> int:
        """A stop signal came before the command started: give the lease back."""
        assert self.pending is not None
        name = signal.Signals(self.pending).name
        log.info("%s before the command started; not starting it, releasing the lease", name)
        try:
            self.holder.release()
        except StoreError as exc:
            log.error("releasing the lease failed: %s", exc)
        return 128 + self.pending

    def _supervise(self, child: _Child) -> int:
        holder = self.holder
        while True:
            if child.exited():
                returncode = child.reap()
                return self._child_exited(returncode)
            loss = holder.loss
            if loss is not None:
                return self._stop_child(child, f"{loss}")
            remaining = holder.remaining_seconds()
            if remaining <= self.lead:
                return self._stop_child(
                    child,
                    f"no successful renewal; local deadline in {remaining:.3f} s"
                    f" (SIGTERM lead {self.lead:.3f} s)",
                )
            wait_for_event(holder.lost, min(POLL_SECONDS, remaining - self.lead))

    def _stop_child(self, child: _Child, reason: str) -> int:
        """Kill the child before the local deadline; exit 75."""
        holder = self.holder
        holder.stop()
        noticed = time.monotonic()
        deadline = holder.deadline
        kill_at = noticed + self.grace
        if deadline is not None:
            kill_at = min(kill_at, deadline - KILL_ALLOWANCE_SECONDS)
        log.error(
            "lease lost: %s; stopping the command (pid %d): SIGTERM now, SIGKILL in %.3f s%s",
            reason,
            child.pid,
            max(0.0, kill_at - noticed),
            "" if deadline is None else f" (local deadline in {deadline - noticed:.3f} s)",
        )
        if kill_at > noticed:
            child.signal_group(signal.SIGTERM)
            while not child.exited() and time.monotonic() < kill_at:
                time.sleep(min(0.01, max(0.0, kill_at - time.monotonic())))
        escalated = not child.exited()
        # The shim sweeps the tree (descendants that left the group too); if it
        # is not scheduled in time, the group's SIGKILL is sent from here
        # halfway through the allowance, so the command dies before the deadline.
        by = None if deadline is None else deadline - KILL_ALLOWANCE_SECONDS / 2
        returncode = child.reap(by)  # SIGKILL to the tree, then reap
        stopped = time.monotonic()
        log.error(
            "command stopped (%s%s) %.3f s after the loss was noticed%s",
            _describe(returncode),
            ", after SIGKILL" if escalated else "",
            stopped - noticed,
            "" if deadline is None else f", {deadline - stopped:.3f} s before the local deadline",
        )
        return EXIT_LEASE_LOST

    def _child_exited(self, returncode: int) -> int:
        code = _exit_code(returncode)
        if self.after_exit is not None:
            log.info(
                "%s arrived after the command ended (%s): recording its outcome",
                signal.Signals(self.after_exit).name,
                _describe(returncode),
            )
        if self.forwarded is not None:
            name = signal.Signals(self.forwarded).name
            log.info(
                "command ended (%s) after %s; releasing the lease", _describe(returncode), name
            )
            try:
                self.holder.release()
            except StoreError as exc:
                log.error("releasing the lease failed: %s", exc)
            # The command's own 75 is not the wrapper's "lease lost".
            return EXIT_COMMAND_FAILED if code == EXIT_LEASE_LOST else code
        result = self._complete(code, _describe(returncode))
        if code == EXIT_LEASE_LOST and self._completed:
            # The command's own 75, recorded under a lease we held: 75 from
            # the wrapper means a lost lease, and this one was not lost.
            log.info(
                "the command exited %d itself (recorded); exiting %d since the lease was held",
                code,
                EXIT_COMMAND_FAILED,
            )
            return EXIT_COMMAND_FAILED
        return result

    def _complete(self, code: int, message: str) -> int:
        outcome = Outcome.SUCCEEDED if code == 0 else Outcome.FAILED
        try:
            result = self.holder.complete(outcome, message=message, exit_code=code)
        except StoreError as exc:
            log.error("lease lost: the completion could not be recorded: %s", exc)
            return EXIT_LEASE_LOST
        if isinstance(result, Rejected):
            record = result.lease.record
            log.error(
                "lease lost: completion refused (%s); the lease is now held by %s with token %s",
                result.rejection,
                record.holder_identity or "nobody",
                record.fencing_token,
            )
            return EXIT_LEASE_LOST
        self._completed = True
        log.info(
            "completed lease %s: %s (%s) under fencing token %s",
            self.holder.key,
            outcome,
            message,
            self.holder.token,
        )
        return code


def run_command(
    command: Sequence[str],
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    holder: LeaseHolder | None = None,
    received: Sequence[int] = (),
    startup: StartupClock | None = None,
) -> int:
    """Run ``command`` under the pod's lease; see the module docstring.

    Args:
        command: the program and its arguments.
        grace_seconds: time between ``SIGTERM`` and ``SIGKILL`` when the lease
            is lost (seconds); never past the local deadline.
        holder: the lease holder, not started (default
            :meth:`LeaseHolder.from_env`); closed at the end.
        received: stop signals that arrived before this call (the command
            line records them from its first instruction): the command is
            then not started and the lease is released.
        startup: marks of the start-up so far; the steps up to the
            command's start are added and logged in one line
            (:mod:`leasehold.worker.startup`).

    Returns:
        The exit code: the child's (``128 + N`` if killed by signal N;
        :data:`EXIT_COMMAND_FAILED` for the child's own 75),
        :data:`EXIT_LEASE_LOST` when the lease was lost or the completion
        refused, ``128 + N`` when stopped by signal N before the start,
        :data:`EXIT_USAGE` for a bad lease environment, 126/127 when the
        command cannot be started.
    """
    if not command:
        log.error("no command given: leasehold run -- CMD ARGS...")
        return EXIT_USAGE
    if holder is None:
        try:
            holder = LeaseHolder.from_env(http_client=True)
        except LeaseEnvironmentError as exc:
            log.error("bad lease environment: %s", exc)
            return EXIT_USAGE
    if startup is not None:
        startup.mark("environment")
    try:
        return _Runner(holder, grace_seconds, received, startup).run(command)
    finally:
        holder.close()


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(
            stream=sys.stderr,
            level=logging.INFO,
            format="%(asctime)s leasehold run[%(process)d] %(levelname)s %(message)s",
        )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grace-seconds",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        metavar="N",
        help="seconds between SIGTERM and SIGKILL when the lease is lost; never past the"
        f" local deadline (default: {DEFAULT_GRACE_SECONDS:g})",
    )
    parser.add_argument(
        "run_argv",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ARGS...",
        help="the command to run",
    )


_DESCRIPTION = """\
Run CMD under the lease the operator claimed for this pod (LEASEHOLD_* env).
The lease is renewed in the background. If it is lost, CMD's process group
gets SIGTERM, then SIGKILL before the local deadline, and leasehold exits 75.
When CMD exits, its outcome is recorded (Succeeded for 0, else Failed) and
leasehold exits with CMD's code (75 if the lease was taken meanwhile).
"""


def _cmd_run(args: argparse.Namespace) -> int:
    """Run, then leave the process at once with the exit code.

    The process is a child subreaper (Linux): should the shim be killed on
    its own, the command's orphans come here, and everything still below
    this process is killed before it exits (it starts no other processes).

    ``os._exit`` (after flushing): a renew request may still be in flight in
    a daemon thread (the API server is unreachable, or the lease was just
    lost); the interpreter's shutdown must neither wait for it nor let it
    wake inside the TLS library mid-shutdown, which aborts the process.
    """
    main_at = getattr(args, "main_at", None)
    startup = StartupClock(main_at if main_at is not None else time.monotonic())
    startup.mark("imports")
    _configure_logging()
    shim.become_subreaper()
    argv = list(args.run_argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    received: Sequence[int] = getattr(args, "early_signals", ())
    code = run_command(argv, grace_seconds=args.grace_seconds, received=received, startup=startup)
    shim.kill_tree(os.getpid())
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def add_run_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``run`` sub-command.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.

    Returns:
        The ``run`` parser; its ``func`` default takes the parsed
        ``argparse.Namespace`` and returns the exit code.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run a command under the pod's lease (renew, kill on loss, record the outcome)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(parser)
    parser.set_defaults(func=_cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``leasehold run`` on its own (without the rest of the CLI).

    Args:
        argv: arguments after ``run`` (default ``sys.argv[1:]``), e.g.
            ``["--grace-seconds", "2", "--", "sh", "-c", "exit 3"]``.

    Returns:
        The exit code (see :func:`run_command`).
    """
    parser = argparse.ArgumentParser(
        prog="leasehold run",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(parser)
    return _cmd_run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
