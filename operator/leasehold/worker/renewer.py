"""The renewal engine of one held lease: renew on schedule, declare the loss at the deadline.

Why a thread per request, and a second try beside a slow one: one request
that hangs (a half-open connection while the API server restarts) must
neither stop the deadline from being enforced nor block the next try, and
one that is only slow (an overloaded API server or node) must not be thrown
away. Each request runs in its own daemon thread. When it has not been
answered within
:attr:`~leasehold.worker.timing.LeaseTiming.request_timeout_seconds`, a new
try starts beside it, on a new connection; the first is still waited for
until :data:`REQUEST_LIFETIME_TIMEOUTS` request timeouts have passed (never
past the deadline), and whichever answer comes first counts, from its own
request's start. So at most two renew requests of a lease are waited for at
once, and a renewal the API server answers within twice the request timeout
is never lost, where giving each request up at one timeout lost every one
of them once answers took longer (the kind bench of 200 jobs at once,
2026-12-05: workers reclaimed with the API server at 0.12 cores). See
:mod:`leasehold.worker.timing` for how the deadline is counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.leaseops import Accepted, Rejected, Result
from leasehold.lease.protocol import MonotonicClock, Rejection, start_grace_seconds
from leasehold.lease.waits import join_thread, wait_for_event
from leasehold.worker.errors import LeaseLost, LossReason
from leasehold.worker.timing import LeaseTiming

log = logging.getLogger(__name__)

RenewRequest = Callable[[float], Result]
"""Sends one renew request bounded by the given timeout (seconds) and returns the store's result."""

BoundProbe = Callable[[float], bool]
"""Reads the lease (no write) within the given timeout (seconds): ``False`` while it
is still not bound to this holder (its claim has not landed, or the lease is not
created yet), ``True`` once a renewal may be judged; may raise any error (the
renewal is then tried)."""

NOT_BOUND_POLLS: Final = (0.05, 0.1, 0.2, 0.4)
"""Seconds between reads while a push lease is not yet bound to this pod (or, for
a job's first attempt, not yet created held by it), then every retry interval.
The operator creates the pod before its claim lands (the claim binds the pod's
UID), so a quick worker starts before it; the claim
usually lands within a few hundred ms, and one retry interval (0.83 s for a
10 s lease) was paid whole by every such start."""


REQUEST_LIFETIME_TIMEOUTS: Final = 2
"""How many request timeouts one renew request is waited for (never past the
deadline). A new try starts beside it after one, so at most this many renew
requests are waited for at once."""


@dataclass(eq=False)
class Attempt:
    """One renew request: when it started, when its answer is due, how it ended."""

    started_at: float
    answer_by: float
    done: threading.Event = field(default_factory=threading.Event)
    result: Result | None = None
    error: BaseException | None = None


class Renewer:
    """Keeps one lease renewed and reports its loss once, through ``on_loss``.

    ``acquired_at`` is the monotonic time taken right before the claim
    request, if this process made it (the first deadline counts from it);
    ``None`` means no deadline is known until :meth:`confirm` renews once.
    After :meth:`halt` (the holder ended or lost the lease) answers still in
    flight are ignored.
    """

    def __init__(
        self,
        renew: RenewRequest,
        timing: LeaseTiming,
        *,
        key: str,
        acquired_at: float | None,
        on_loss: Callable[[LeaseLost], None],
        monotonic: MonotonicClock = time.monotonic,
        bound: BoundProbe | None = None,
    ) -> None:
        self.timing = timing
        self.key = key
        self._renew = renew
        self._bound = bound
        self.confirm_tries = 0
        """Renew requests :meth:`confirm` sent (the last one accepted)."""
        self.confirm_reads = 0
        """Reads :meth:`confirm` made while the lease was not yet bound to this holder."""
        self._on_loss = on_loss
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._last_ok_start: float | None = acquired_at
        self._retry_at: float | None = None
        self._failures = 0
        self._pending: list[Attempt] = []
        """The loop's renew requests in flight, oldest first (at most
        :data:`REQUEST_LIFETIME_TIMEOUTS`)."""
        self._in_flight: set[Attempt] = set()
        self._halted = False
        self._thread: threading.Thread | None = None

    # -- state -----------------------------------------------------------

    @property
    def deadline(self) -> float | None:
        """The local deadline (monotonic), ``None`` before the first successful renewal."""
        with self._lock:
            return self._deadline_locked()

    def _deadline_locked(self) -> float | None:
        if self._last_ok_start is None:
            return None
        return self.timing.deadline_after(self._last_ok_start)

    def _next_renew_locked(self) -> float:
        if self._retry_at is not None:
            return self._retry_at
        assert self._last_ok_start is not None
        return self._last_ok_start + self.timing.renew_interval_seconds

    # -- one request -----------------------------------------------------

    def _send(self, attempt: Attempt) -> None:
        """Send one renew request; the timeout is computed last, so it ends by ``answer_by``."""
        try:
            attempt.result = self._renew(max(attempt.answer_by - self._monotonic(), 0.001))
        except BaseException as exc:  # reported to the renewer, never lost
            attempt.error = exc
        finally:
            with self._lock:
                self._in_flight.discard(attempt)
            attempt.done.set()
            self._wake.set()

    def _launch(self, deadline: float, timeout: float | None = None) -> Attempt:
        """Start one renew request in its own daemon thread; the clock is read first.

        Args:
            deadline: no answer is waited for past it (monotonic).
            timeout: how long to wait for the answer (seconds); default
                :data:`REQUEST_LIFETIME_TIMEOUTS` request timeouts of the
                timing (a new try starts beside it after one).

        Returns:
            The attempt; its ``done`` is set once it is answered or failed.
        """
        started_at = self._monotonic()
        if timeout is None:
            timeout = REQUEST_LIFETIME_TIMEOUTS * self.timing.request_timeout_seconds
        answer_by = min(started_at + timeout, deadline)
        attempt = Attempt(started_at, answer_by)
        with self._lock:
            self._in_flight.add(attempt)
        threading.Thread(
            target=self._send, args=(attempt,), name=f"leasehold-renew-{self.key}", daemon=True
        ).start()
        return attempt

    def _apply(self, attempt: Attempt, *, starting: bool = False) -> LeaseLost | None:
        """Take a finished attempt's outcome into the state; return the loss it reported.

        ``starting``: a renewal of :meth:`confirm`, before the first one was
        accepted: a lease not found then is one not created yet (the operator
        creates a job's first lease already held by the pod, after the pod),
        waited for as a lease not yet bound; after start-up it is a loss.
        """
        result, error = attempt.result, attempt.error
        if isinstance(result, Accepted):
            with self._lock:
                if self._halted:
                    return None
                if self._last_ok_start is None or attempt.started_at > self._last_ok_start:
                    self._last_ok_start = attempt.started_at
                self._retry_at = None
                if self._failures:
                    log.info(
                        "lease %s renewed again after %d failed tries", self.key, self._failures
                    )
                self._failures = 0
            log.debug("lease %s renewed", self.key)
            return None
        loss: LeaseLost | None = None
        if isinstance(result, Rejected) and result.rejection is Rejection.NOT_BOUND:
            # Push mode: the operator has not yet bound the lease to this pod
            # (it does so right after creating it). No loss: retry, as for a
            # failed request, until the local deadline.
            error = RuntimeError(f"lease {self.key} is not yet bound to this pod")
        elif starting and isinstance(error, LeaseNotFoundError):
            # Push mode: the lease is created held by this pod after the pod.
            error = RuntimeError(f"lease {self.key} does not exist yet")
        elif isinstance(result, Rejected):
            lease = result.lease.record
            loss = LeaseLost(
                result.rejection,
                f"renewal refused; lease now held by {lease.holder_identity or 'nobody'}"
                f" with token {lease.fencing_token}",
            )
        elif isinstance(error, LeaseNotFoundError):
            loss = LeaseLost(LossReason.LEASE_DELETED, str(error))
        if loss is not None:
            self._on_loss(loss)
            return loss
        now = self._monotonic()
        with self._lock:
            if self._halted:
                return None
            self._failures += 1
            failures = self._failures
            # Tries start at most every retry interval: a quick refusal waits,
            # a try that used up its timeout is followed at once.
            self._retry_at = max(now, attempt.started_at + self.timing.retry_interval_seconds)
            deadline = self._deadline_locked()
        left = "unknown" if deadline is None else f"{deadline - now:.2f} s"
        log.warning(
            "renewing lease %s failed (try %d, local deadline in %s): %s",
            self.key,
            failures,
            left,
            error
            if error is not None
            else f"no answer within {attempt.answer_by - attempt.started_at:.3g} s",
        )
        return None

    def renew_once(self) -> Attempt:
        """Renew now in this thread; return the finished attempt (its state already applied)."""
        deadline = self.deadline
        now = self._monotonic()
        if deadline is None:
            deadline = now + self.timing.window_seconds
        attempt = Attempt(started_at=now, answer_by=self.timing.answer_by(now, deadline))
        with self._lock:
            self._in_flight.add(attempt)
        self._send(attempt)
        self._apply(attempt)
        return attempt

    # -- the loop --------------------------------------------------------

    def confirm(self) -> Accepted:
        """Renew until one renewal succeeds, retrying for a lease duration and the start grace.

        Nothing has started yet, so nothing needs fencing while this retries:
        each accepted renewal opens its window from its own request's start,
        and one accepted too late for its window is followed by another. The
        extra time is the operator's start grace for a running pod's first
        renewal (:func:`~leasehold.lease.protocol.start_grace_seconds`: one
        lease duration, at most 60 s; docs/lifecycle.md, "Starting is not
        stalling"): a confirm that lands after the operator reclaimed is
        refused ``NotHolder``, a loss. The tries end a lease duration and the
        grace after the first (the operator's bound counts from the pod
        running, before it). An accepted confirm is returned only with
        :meth:`confirm_left_seconds` of its window still to come, so the
        command does not start into a window about to close.

        Returns:
            The accepted renewal (its lease record carries the lease's own
            duration, which the holder times its window by), its window open.

        Raises:
            LeaseLost: a renewal was refused, the lease is gone, the renewer
                was halted, or no renewal succeeded within the lease duration
                and the start grace.
        """
        bound = self.timing.duration_seconds + start_grace_seconds(self.timing.duration_seconds)
        give_up_at = self._monotonic() + bound
        last_error: BaseException | None = None
        accepted = False
        while True:
            with self._lock:
                halted = self._halted
            if halted:
                raise LeaseLost(LossReason.ENDED, f"the holder of {self.key} was stopped")
            now = self._monotonic()
            if now >= give_up_at:
                raise LeaseLost(
                    LossReason.DEADLINE_PASSED,
                    f"could not renew {self.key} within {bound:.3g} s (last error: {last_error})",
                )
            attempt = self._launch(give_up_at, self.confirm_timeout_seconds())
            self.confirm_tries += 1
            wait_for_event(attempt.done, attempt.answer_by - self._monotonic())
            if not attempt.done.is_set():
                last_error = TimeoutError(
                    f"no answer within {self.timing.request_timeout_seconds:.3g} s"
                )
                continue  # given up: try again at once (the loop ends at give_up_at)
            loss = self._apply(attempt, starting=not accepted)
            if loss is not None:
                raise loss.again()
            if isinstance(attempt.result, Accepted):
                accepted = True  # the lease exists: a 404 from now on is a deletion
                deadline = self.deadline
                if deadline is None:
                    continue  # halted meanwhile (the answer was dropped): ends above
                if deadline - self._monotonic() > self.confirm_left_seconds():
                    return attempt.result
                last_error = TimeoutError(
                    f"accepted {self._monotonic() - attempt.started_at:.3g} s after it was sent,"
                    " too little of its window left"
                )
                continue  # its window (nearly) closed on the way back: renew again at once
            last_error = attempt.error
            result = attempt.result
            absent = isinstance(attempt.error, LeaseNotFoundError)
            if absent or (isinstance(result, Rejected) and result.rejection is Rejection.NOT_BOUND):
                last_error = RuntimeError(
                    f"lease {self.key} "
                    + ("does not exist yet" if absent else "is not yet bound to this pod")
                )
                if self._bound is not None and self._wait_bound(give_up_at):
                    continue  # bound now (or may be judged): the renewal confirms at once
            time.sleep(
                min(self.timing.retry_interval_seconds, max(0.0, give_up_at - self._monotonic()))
            )

    def confirm_left_seconds(self) -> float:
        """Seconds of its window an accepted confirm must leave to be started on.

        Half the window, at most one request timeout: the command's start
        (the renewer thread, the shim's fork and exec) and the first renewal
        after it fit in it.
        """
        return min(self.timing.request_timeout_seconds, self.timing.window_seconds / 2)

    def confirm_timeout_seconds(self) -> float:
        """Seconds a confirm renewal is waited for: half the window, at least the request timeout.

        A renewal's deadline counts from its start, so a confirm answered late
        loses only the time it took; giving up early loses the try. Each try
        given up is retried on a new connection (a TLS handshake), which on an
        overloaded API server takes as long again: with the renewals' timeout
        (1.67 s for a 10 s lease), 100 pods started at once on 2 shared cores
        at load 60-90 left 28-47% of their wrappers unconfirmed after the whole
        8 s window (``bench/startup.py``, 2026-12-05). Two tries still fit in
        the window when a connection hangs.
        """
        return max(self.timing.request_timeout_seconds, self.timing.window_seconds / 2)

    def _wait_bound(self, give_up_at: float) -> bool:
        """Read the lease until it is bound to this holder (or may be judged), or ``give_up_at``.

        Reads, not refused renewals: a refused renewal is a write request and a
        read (the store re-reads to say why). Soon after the pod started the
        reads are quick (:data:`NOT_BOUND_POLLS`), then one per retry interval.
        Nothing is decided here: the renewal that follows is what confirms.

        Returns:
            ``True`` once a read found the lease bound (or judgeable): renew at
            once. ``False`` when a read failed or ``give_up_at`` came: the
            caller waits its retry interval before the next renewal, so a read
            that keeps failing (an overloaded API server answering 429) never
            turns the wait into a renewal every 0.05 s.
        """
        assert self._bound is not None
        delays = iter(NOT_BOUND_POLLS)
        while True:
            left = give_up_at - self._monotonic()
            if left <= 0:
                return False
            time.sleep(min(next(delays, self.timing.retry_interval_seconds), left))
            self.confirm_reads += 1
            try:
                if self._bound(min(self.timing.request_timeout_seconds, max(left, 0.001))):
                    return True
            except Exception as exc:  # the renewal tells what is wrong
                log.debug("reading lease %s while not bound failed: %s", self.key, exc)
                return False

    def retime(self, timing: LeaseTiming) -> None:
        """Time the window, the renewals and the requests by ``timing`` from now on."""
        with self._lock:
            self.timing = timing
        self._wake.set()

    def start(self) -> None:
        """Start the renewer thread (a deadline must be known: see :meth:`confirm`)."""
        self._thread = threading.Thread(
            target=self._loop, name=f"leasehold-renewer-{self.key}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        """The renewer thread: renew on schedule; declare loss at the deadline.

        A request not answered within the request timeout gets a new try
        beside it (:data:`REQUEST_LIFETIME_TIMEOUTS`); answers are taken in
        the order their requests started, each counting from its own start.
        """
        while True:
            with self._lock:
                if self._halted:
                    return
                answered = [a for a in self._pending if a.done.is_set()]
                now = self._monotonic()
                # Hung past its lifetime: given up, counted as a failure ("no answer").
                expired = [a for a in self._pending if not a.done.is_set() and now >= a.answer_by]
                ended = set(answered) | set(expired)
                self._pending = [a for a in self._pending if a not in ended]
            if ended:
                for attempt in sorted(ended, key=lambda a: a.started_at):
                    if self._apply(attempt) is not None:
                        return
                    if isinstance(attempt.result, Accepted):
                        with self._lock:  # older tries can no longer move the deadline
                            self._pending = [
                                a for a in self._pending if a.started_at > attempt.started_at
                            ]
                continue
            with self._lock:
                deadline = self._deadline_locked()
                next_renew = self._next_renew_locked()
                newest = self._pending[-1] if self._pending else None
            assert deadline is not None
            now = self._monotonic()
            if now >= deadline:
                self._on_loss(
                    LeaseLost(
                        LossReason.DEADLINE_PASSED,
                        "no successful renewal in time"
                        + (" (a renew request is still in flight)" if newest else ""),
                    )
                )
                return
            if newest is None:
                launch_at = next_renew
            else:  # a try beside the newest once it has gone unanswered for a timeout
                launch_at = max(next_renew, newest.started_at + self.timing.request_timeout_seconds)
            if now >= launch_at:
                if newest is not None:
                    log.info(
                        "renewal of lease %s not answered within %.3g s: trying again beside it",
                        self.key,
                        self.timing.request_timeout_seconds,
                    )
                new_attempt = self._launch(deadline)
                with self._lock:
                    self._pending.append(new_attempt)
                continue
            with self._lock:
                wake_at = min([deadline, launch_at, *(a.answer_by for a in self._pending)])
            wait_for_event(self._wake, wake_at - now)
            self._wake.clear()

    # -- stopping --------------------------------------------------------

    def halt(self) -> None:
        """Stop renewing without waiting; later answers are ignored (idempotent)."""
        with self._lock:
            self._halted = True
        self._wake.set()

    def stop(self) -> None:
        """Halt, and wait (at most 1 s) for the renewer thread unless called from it."""
        self.halt()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            join_thread(thread, 1.0)

    def wait_in_flight(self, wait_seconds: float) -> None:
        """Wait for requests in flight: a little past their timeout, at most ``wait_seconds``.

        Lets a process exit without a daemon thread waking inside the TLS
        library while the interpreter shuts down (which can abort the process).
        """
        give_up_at = self._monotonic() + wait_seconds
        with self._lock:
            in_flight = list(self._in_flight)
        for attempt in in_flight:
            until = min(give_up_at, attempt.answer_by + 0.05)
            wait_for_event(attempt.done, until - self._monotonic())
