"""The worker SDK: hold a lease, renew it in the background, stop when it is lost.

Why this module exists: a worker must stop producing effects *before* the
operator may hand its job to someone else (``docs/architecture.md``, "How
expiry is judged"). The operator
calls a lease expired when it saw no change for ``duration + margin`` on its
own monotonic clock, counted from when it *saw* the change. A worker's
renewal request starts before the operator can see its result, so a worker
deadline counted on the worker's monotonic clock from the **start** of its
last successful renew request, minus a margin, always ends first::

    request start ─┬─ API server writes ─┬─ operator sees it ─ ... ─ operator's expiry
                   │                     │
                   └── worker deadline = start + duration - margin (earlier)

No wall clock of any machine is compared. A renew request that hangs cannot
stretch the deadline: it is given a timeout that ends at the deadline (when
the store accepts one), and the deadline is enforced by the renewer thread
whether or not the request ever returns.

What it offers:

* :class:`LeaseHolder`, the holder of an already-claimed lease (push mode:
  :meth:`LeaseHolder.from_env` reads what the operator injected into the
  pod). It renews every ``renew_fraction * duration`` in a daemon thread.
  On loss (a rejected renewal, the lease deleted, or the local deadline
  passing without a successful renewal) it sets :attr:`LeaseHolder.lost`,
  calls ``on_lost`` and makes :meth:`LeaseHolder.check` raise
  :class:`LeaseLost`.
* Sync code: ``with holder:`` or :meth:`LeaseHolder.run`. Python threads
  cannot be interrupted safely, so **a sync worker must call**
  :meth:`LeaseHolder.check` **right before every effect** (and pass
  :attr:`LeaseHolder.token` to fenced targets); ``on_lost`` can set a flag
  or interrupt the main thread (``_thread.interrupt_main``) if that suits.
* Async code: ``async with holder.guard():`` cancels the task running the
  block when the lease is lost and raises :class:`LeaseLost` out of it.
* Pull mode: :func:`claim` and :func:`claim_any` for worker pools that take
  work themselves.

A lease is temporary ownership, not exactly-once: a worker can lose its lease
after an effect left it and before it completes. Effects outside the store
must be fenced at the target with :attr:`LeaseHolder.token`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Protocol, TypeVar

from leasehold import fencing
from leasehold.lease.errors import LeaseNotFoundError, TransientStoreError
from leasehold.lease.kubeclient import new_api_client
from leasehold.lease.protocol import (
    FencingToken,
    HolderIdentity,
    MonotonicClock,
    Outcome,
    Rejection,
)
from leasehold.lease.store import Accepted, LeaseStore, Rejected, Result, StoredLease
from leasehold.lease.waits import join_thread, wait_for_event
from leasehold.names import (
    ENV_FENCING_TOKEN,
    ENV_HOLDER,
    ENV_JOB,
    ENV_LEASE,
    ENV_LEASE_DURATION,
    ENV_NAMESPACE,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_RENEW_FRACTION: Final = 1 / 3
"""Renew every third of the lease duration: two renewals can fail in a row."""

FINAL_WRITE_DELAYS: Final = (0.5, 1.0, 2.0)
"""Back-off (seconds) between tries of a completion or release that failed
transiently; after the last one the error is raised."""

FINAL_WRITE_TIMEOUT_SECONDS: Final = 10.0
"""Per-request timeout of a completion or release (when the store takes one)."""


# --------------------------------------------------------------------------
# Errors


class LossReason(enum.StrEnum):
    """Why a holder lost its lease when no protocol rejection says so."""

    DEADLINE_PASSED = "DeadlinePassed"
    """The local deadline passed without a successful renewal."""
    LEASE_DELETED = "LeaseDeleted"
    """The JobLease is gone (its LeasedJob was deleted)."""
    ENDED = "Ended"
    """This holder completed or released the lease itself."""


class LeaseLost(Exception):  # noqa: N818 - it names an event, like KeyboardInterrupt
    """The lease is no longer held: stop producing effects now.

    Attributes:
        reason: a :class:`~leasehold.lease.protocol.Rejection` when the store
            refused the holder (``STALE_TOKEN``, ``NOT_HOLDER``,
            ``COMPLETED``), else a :class:`LossReason`.
        detail: human-readable context (may be empty).
    """

    def __init__(self, reason: Rejection | LossReason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason
        self.detail = detail

    def again(self) -> LeaseLost:
        """A fresh copy to raise once more (re-raising one object grows its traceback).

        Returns:
            A new :class:`LeaseLost` with the same reason and detail.
        """
        return LeaseLost(self.reason, self.detail)


class LeaseEnvironmentError(ValueError):
    """A ``LEASEHOLD_*`` variable the holder needs is missing or malformed."""


# --------------------------------------------------------------------------
# The store, as the holder uses it (a port: LeaseStore implements it)


class LeaseOperations(Protocol):
    """The lease operations a holder needs; :class:`~leasehold.lease.store.LeaseStore` has them.

    ``request_timeout`` (seconds) bounds one API request, so a renewal that
    hangs cannot run past the holder's deadline.
    """

    def claim(
        self,
        namespace: str,
        name: str,
        claimant: str,
        *,
        observed: StoredLease | None = None,
    ) -> Result:
        """Claim an unheld lease. See :meth:`LeaseStore.claim`.

        ``observed`` is the lease as the caller last saw it; an
        implementation may ignore it (it only saves a read). :func:`claim`
        passes it only when it has one; :func:`claim_any` always does.
        """
        ...

    def renew(
        self,
        namespace: str,
        name: str,
        holder: str,
        token: int,
        *,
        request_timeout: float | None = None,
    ) -> Result:
        """Renew. See :meth:`LeaseStore.renew`."""
        ...

    def complete(
        self,
        namespace: str,
        name: str,
        holder: str,
        token: int,
        outcome: Outcome,
        *,
        message: str = "",
        exit_code: int | None = None,
        request_timeout: float | None = None,
    ) -> Result:
        """Complete. See :meth:`LeaseStore.complete`."""
        ...

    def release(
        self,
        namespace: str,
        name: str,
        holder: str,
        token: int,
        *,
        request_timeout: float | None = None,
    ) -> Result:
        """Release. See :meth:`LeaseStore.release`."""
        ...

    def list_leases(
        self, namespace: str, *, label_selector: str | None = None
    ) -> list[StoredLease]:
        """List leases. See :meth:`LeaseStore.list_leases`."""
        ...


def _timeout_kwargs(timeout: float) -> dict[str, Any]:
    """The keyword that bounds one store request to ``timeout`` seconds."""
    return {"request_timeout": max(timeout, 0.001)}


_RETRYABLE: Final = (TransientStoreError, OSError)
"""Errors after which a write may be tried again (the store converts client
timeouts and dropped connections to :class:`TransientStoreError`)."""


# --------------------------------------------------------------------------
# Timing (pure arithmetic)


def default_margin_seconds(duration_seconds: float) -> float:
    """The default safety margin for a lease duration.

    ``max(1 s, 20 % of the duration)``, but at most half the duration, so a
    short lease keeps a usable window.

    Args:
        duration_seconds: the lease duration (seconds, > 0).

    Returns:
        The margin in seconds.
    """
    return min(max(1.0, 0.2 * duration_seconds), 0.5 * duration_seconds)


@dataclass(frozen=True)
class LeaseTiming:
    """When a holder renews and how long a successful renewal lets it work.

    Attributes:
        duration_seconds: the lease duration.
        renew_interval_seconds: time between the starts of two renewals.
        margin_seconds: how much earlier than ``duration`` after a renewal
            started the holder gives up.
    """

    duration_seconds: float
    renew_interval_seconds: float
    margin_seconds: float

    @classmethod
    def for_duration(
        cls,
        duration_seconds: float,
        *,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        margin_seconds: float | None = None,
    ) -> LeaseTiming:
        """Derive the timing of a lease from its duration.

        Args:
            duration_seconds: the lease duration (seconds, > 0).
            renew_fraction: renew every ``renew_fraction * duration``.
            margin_seconds: the margin (default :func:`default_margin_seconds`).

        Returns:
            The timing.

        Raises:
            ValueError: the values leave no time to renew before the deadline
                (the interval must be shorter than ``duration - margin``).
        """
        if not duration_seconds > 0:
            raise ValueError(f"duration_seconds must be > 0, got {duration_seconds}")
        if not 0 < renew_fraction < 1:
            raise ValueError(f"renew_fraction must be in (0, 1), got {renew_fraction}")
        margin = (
            default_margin_seconds(duration_seconds) if margin_seconds is None else margin_seconds
        )
        if not 0 <= margin < duration_seconds:
            raise ValueError(f"margin_seconds must be in [0, {duration_seconds}), got {margin}")
        interval = renew_fraction * duration_seconds
        if interval >= duration_seconds - margin:
            raise ValueError(
                f"renewing every {interval:.3g} s leaves no time before the deadline"
                f" ({duration_seconds:.3g} s duration - {margin:.3g} s margin)"
            )
        return cls(duration_seconds, interval, margin)

    @property
    def window_seconds(self) -> float:
        """How long after a successful renewal *started* the holder may work."""
        return self.duration_seconds - self.margin_seconds

    @property
    def retry_interval_seconds(self) -> float:
        """Pause after a failed renewal before the next try (seconds)."""
        return min(1.0, self.renew_interval_seconds / 4)

    def deadline_after(self, request_start: float) -> float:
        """The local deadline earned by a successful renewal.

        Args:
            request_start: monotonic time taken right *before* the request
                was sent (never when its answer came back).

        Returns:
            Monotonic time at which the holder must have stopped.
        """
        return request_start + self.window_seconds


# --------------------------------------------------------------------------
# The holder


@dataclass(eq=False)
class _Attempt:
    """One renew request in flight in its own daemon thread."""

    started_at: float
    answer_by: float
    done: threading.Event = field(default_factory=threading.Event)
    result: Result | None = None
    error: BaseException | None = None


LossCallback = Callable[[LeaseLost], object]
"""Called once when a lease is lost, with the :class:`LeaseLost` describing why."""


class LeaseHolder:
    """The holder of an already-claimed lease: renews it and notices its loss.

    Build one with :meth:`from_env` (push mode: the operator claimed for this
    pod), :func:`claim` / :func:`claim_any` (pull mode), or directly. Then
    :meth:`start` it (``with holder:`` does), do the work calling
    :meth:`check` before every effect, and end with :meth:`complete` (or
    :meth:`release` to give the job back).

    Thread-safe. ``on_lost`` and the loss handling run in the renewer thread
    (or in the thread whose :meth:`check` noticed the deadline passing).

    Args:
        store: the lease store (usually a :class:`~leasehold.lease.store.LeaseStore`).
        namespace: the lease's namespace.
        lease_name: the JobLease's name.
        holder_identity: who holds it (the pod name in push mode).
        token: the fencing token the claim produced.
        lease_duration_seconds: the lease duration (seconds).
        job_name: the LeasedJob's name, if known (for logs).
        renew_fraction: renew every ``renew_fraction * duration``.
        margin_seconds: see :class:`LeaseTiming` (default
            :func:`default_margin_seconds`).
        acquired_at: monotonic time (on ``monotonic``) taken right before the
            claim request was sent, if this process made it; the first
            deadline counts from it. ``None`` (push mode: someone else
            claimed, at a time this process cannot know) makes :meth:`start`
            renew once before returning.
        on_lost: called once when the lease is lost.
        monotonic: the clock (injected for tests).

    Raises:
        ValueError: bad timing values (see :meth:`LeaseTiming.for_duration`).
    """

    def __init__(
        self,
        store: LeaseOperations,
        namespace: str,
        lease_name: str,
        holder_identity: str,
        token: int,
        lease_duration_seconds: float,
        *,
        job_name: str | None = None,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        margin_seconds: float | None = None,
        acquired_at: float | None = None,
        on_lost: LossCallback | None = None,
        monotonic: MonotonicClock = time.monotonic,
    ) -> None:
        self.namespace = namespace
        self.lease_name = lease_name
        self.holder_identity = HolderIdentity(holder_identity)
        self.job_name = job_name
        self.timing = LeaseTiming.for_duration(
            lease_duration_seconds, renew_fraction=renew_fraction, margin_seconds=margin_seconds
        )
        self._timing_args = (renew_fraction, margin_seconds)
        self.lost = threading.Event()
        """Set once the lease is lost (never for this holder's own complete/release)."""
        self._store = store
        self._token = FencingToken(token)
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._last_ok_start: float | None = acquired_at
        self._retry_at: float | None = None
        self._failures = 0
        self._attempt: _Attempt | None = None
        self._loss: LeaseLost | None = None
        self._listeners: list[LossCallback] = [on_lost] if on_lost is not None else []
        self._started = False
        self._stopping = False
        self._final: Result | None = None
        self._final_tried = False
        self._thread: threading.Thread | None = None
        self._in_flight: set[_Attempt] = set()
        self._owned_api_client: Any = None

    # -- construction ----------------------------------------------------

    @classmethod
    def from_env(
        cls,
        *,
        store: LeaseOperations | None = None,
        environ: Mapping[str, str] | None = None,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        margin_seconds: float | None = None,
        on_lost: LossCallback | None = None,
    ) -> LeaseHolder:
        """Build the holder of the lease the operator claimed for this pod.

        Reads ``LEASEHOLD_NAMESPACE``, ``LEASEHOLD_LEASE``,
        ``LEASEHOLD_HOLDER``, ``LEASEHOLD_FENCING_TOKEN``,
        ``LEASEHOLD_LEASE_DURATION_SECONDS`` and (optional) ``LEASEHOLD_JOB``.
        Without ``store``, a :class:`~leasehold.lease.store.LeaseStore` is built on
        :func:`~leasehold.lease.kubeclient.new_api_client` (``$KUBECONFIG`` or
        in-cluster); :meth:`close` closes that client.

        The holder is not started: the claim happened elsewhere, so
        :meth:`start` renews once to learn its deadline.

        Args:
            store: the lease store, or ``None`` to build one.
            environ: the environment (default ``os.environ``).
            renew_fraction: see :class:`LeaseHolder`.
            margin_seconds: see :class:`LeaseHolder`.
            on_lost: see :class:`LeaseHolder`.

        Returns:
            The holder, not started.

        Raises:
            LeaseEnvironmentError: a variable is missing or malformed.
            kubernetes.config.ConfigException: no store given and no cluster
                configuration found.
        """
        env = os.environ if environ is None else environ

        required = (ENV_NAMESPACE, ENV_LEASE, ENV_HOLDER, ENV_FENCING_TOKEN, ENV_LEASE_DURATION)
        missing = [name for name in required if not env.get(name, "").strip()]
        if missing:
            raise LeaseEnvironmentError(
                f"not set: {', '.join(missing)} (the operator sets them in the pods it starts)"
            )

        def need(name: str) -> str:
            return env[name].strip()

        namespace = need(ENV_NAMESPACE)
        lease = need(ENV_LEASE)
        holder = need(ENV_HOLDER)
        raw_token, raw_duration = need(ENV_FENCING_TOKEN), need(ENV_LEASE_DURATION)
        try:
            token = int(raw_token)
            duration = float(raw_duration)
        except ValueError as exc:
            raise LeaseEnvironmentError(f"malformed lease environment: {exc}") from exc
        if token < 1:
            raise LeaseEnvironmentError(f"{ENV_FENCING_TOKEN} must be >= 1, got {token}")
        if not (duration > 0 and math.isfinite(duration)):
            raise LeaseEnvironmentError(f"{ENV_LEASE_DURATION} must be > 0, got {duration}")
        api_client: Any = None  # built here, owned by the holder
        if store is None:
            api_client = new_api_client()
            store = LeaseStore(api_client)
        try:
            holder_obj = cls(
                store,
                namespace,
                lease,
                holder,
                token,
                duration,
                job_name=env.get(ENV_JOB) or None,
                renew_fraction=renew_fraction,
                margin_seconds=margin_seconds,
                on_lost=on_lost,
            )
        except ValueError as exc:
            if api_client is not None:
                api_client.close()
            raise LeaseEnvironmentError(str(exc)) from exc
        holder_obj._owned_api_client = api_client
        return holder_obj

    # -- state -----------------------------------------------------------

    @property
    def token(self) -> FencingToken:
        """The fencing token to send with every effect (targets reject lower ones)."""
        return self._token

    def effect_key(self, step: str) -> str:
        """The idempotency key of one effect of this attempt: ``job/token/step``.

        Args:
            step: the effect's name within the attempt (e.g. ``"charge-card"``).

        Returns:
            e.g. ``"ns/payout/8/charge-card"``: unique per job, attempt and step.
        """
        return fencing.idempotency_key(
            f"{self.namespace}/{self.job_name or self.lease_name}", self._token, step
        )

    def fencing_headers(self, resource: str, step: str | None = None) -> dict[str, str]:
        """HTTP headers that carry this attempt's token to a fenced service.

        Args:
            resource: the resource key the request writes.
            step: name of the effect, for an ``Idempotency-Key`` header.

        Returns:
            Headers for :class:`~leasehold.fencing.http.FencingMiddleware`.
        """
        from leasehold.fencing.http import fencing_headers

        key = self.effect_key(step) if step is not None else None
        return fencing_headers(self._token, resource, key)

    def sql_params(self, resource: str, step: str | None = None) -> dict[str, Any]:
        """Named SQL parameters for :data:`leasehold.fencing.postgres.FENCE_SQL`.

        Args:
            resource: the resource key the statement writes.
            step: name of the effect, for its idempotency key.

        Returns:
            ``{"leasehold_token": ..., "leasehold_resource": ..., ...}``.
        """
        from leasehold.fencing.postgres import sql_params

        key = self.effect_key(step) if step is not None else None
        return dict(sql_params(self._token, resource, key))

    def annotate(self, body: dict[str, Any]) -> dict[str, Any]:
        """Put this attempt's token on a Kubernetes object (fenced by the policy).

        Args:
            body: the object (or patch) as a dict; changed in place.

        Returns:
            ``body``, with the ``leasehold.dev/fencing-token`` annotation.
        """
        from leasehold.fencing.kube import annotate

        return annotate(body, self._token)

    @property
    def key(self) -> str:
        """``namespace/name`` of the lease, for messages."""
        return f"{self.namespace}/{self.lease_name}"

    @property
    def deadline(self) -> float | None:
        """The local deadline (on the holder's monotonic clock), ``None`` before the first."""
        with self._lock:
            return self._deadline_locked()

    @property
    def loss(self) -> LeaseLost | None:
        """Why the lease was lost, or ``None`` while it is held."""
        with self._lock:
            return self._loss

    def remaining_seconds(self) -> float:
        """Seconds left before the local deadline.

        Returns:
            ``>= 0``; ``0.0`` once the lease is lost, ended, past its deadline
            or before its first deadline is known.
        """
        with self._lock:
            deadline = self._deadline_locked()
            if self._loss is not None or self._final is not None or deadline is None:
                return 0.0
        return max(0.0, deadline - self._monotonic())

    def check(self) -> None:
        """Raise unless the lease is held now. Call it before every effect.

        Raises:
            LeaseLost: the lease was lost (``reason`` is the rejection or
                :attr:`LossReason.DEADLINE_PASSED`); or this holder ended it
                (:attr:`LossReason.ENDED`); or it has not been confirmed yet
                (:meth:`start` not called: ``DEADLINE_PASSED``).
        """
        with self._lock:
            if self._loss is not None:
                raise self._loss.again()
            if self._final is not None:
                raise LeaseLost(LossReason.ENDED, f"{self.key} was completed or released")
            deadline = self._deadline_locked()
            started = self._started
        if deadline is None:
            raise LeaseLost(LossReason.DEADLINE_PASSED, f"{self.key}: not confirmed (not started)")
        now = self._monotonic()
        if now >= deadline:
            loss = LeaseLost(
                LossReason.DEADLINE_PASSED, f"local deadline passed {now - deadline:.3f} s ago"
            )
            if started:
                self._lose(loss)
            raise loss

    def _deadline_locked(self) -> float | None:
        if self._last_ok_start is None:
            return None
        return self.timing.deadline_after(self._last_ok_start)

    def _next_renew_locked(self) -> float:
        if self._retry_at is not None:
            return self._retry_at
        assert self._last_ok_start is not None
        return self._last_ok_start + self.timing.renew_interval_seconds

    def add_loss_callback(self, callback: LossCallback) -> Callable[[], None]:
        """Call ``callback`` once when the lease is lost (at once if it already is).

        Args:
            callback: takes the :class:`LeaseLost`; must not block.

        Returns:
            A function that unregisters the callback.
        """
        with self._lock:
            loss = self._loss
            if loss is None:
                self._listeners.append(callback)
        if loss is not None:
            callback(loss)

        def remove() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return remove

    def _lose(self, loss: LeaseLost) -> None:
        """Record the loss once; wake everyone; call the callbacks."""
        with self._lock:
            if self._loss is not None or self._final is not None:
                return
            self._loss = loss
            listeners = list(self._listeners)
            self._listeners.clear()
            self._wake.set()
        self.lost.set()
        log.error(
            "lease %s lost (holder %s, token %s): %s",
            self.key,
            self.holder_identity,
            self._token,
            loss,
        )
        for callback in listeners:
            try:
                callback(loss)
            except Exception:
                log.exception("on_lost callback %r failed", callback)

    # -- renewing --------------------------------------------------------

    def _send_renew(self, attempt: _Attempt, answer_by: float) -> None:
        """Body of an attempt's thread: one renew request, answered by ``answer_by``.

        The timeout is computed last, right before sending, so the request
        cannot run past ``answer_by`` (the deadline).
        """
        try:
            renew = self._store.renew
            kwargs = _timeout_kwargs(answer_by - self._monotonic())
            attempt.result = renew(
                self.namespace, self.lease_name, self.holder_identity, self._token, **kwargs
            )
        except BaseException as exc:  # reported to the renewer, never lost
            attempt.error = exc
        finally:
            with self._lock:
                self._in_flight.discard(attempt)
            attempt.done.set()
            self._wake.set()

    def _launch(self, answer_by: float) -> _Attempt:
        """Start one renew request in its own daemon thread; the clock is read first."""
        attempt = _Attempt(started_at=self._monotonic(), answer_by=answer_by)
        with self._lock:
            self._in_flight.add(attempt)
        threading.Thread(
            target=self._send_renew,
            args=(attempt, answer_by),
            name=f"leasehold-renew-{self.lease_name}",
            daemon=True,
        ).start()
        return attempt

    def _apply(self, attempt: _Attempt) -> None:
        """Take a finished attempt's outcome into the holder's state."""
        result, error = attempt.result, attempt.error
        if isinstance(result, Accepted):
            with self._lock:
                if self._loss is not None or self._final is not None:
                    return
                if self._last_ok_start is None or attempt.started_at > self._last_ok_start:
                    self._last_ok_start = attempt.started_at
                self._retry_at = None
                if self._failures:
                    log.info(
                        "lease %s renewed again after %d failed tries", self.key, self._failures
                    )
                self._failures = 0
            log.debug("lease %s renewed (token %s)", self.key, self._token)
            return
        if isinstance(result, Rejected):
            lease = result.lease.record
            self._lose(
                LeaseLost(
                    result.rejection,
                    f"renewal refused; lease now held by {lease.holder_identity or 'nobody'}"
                    f" with token {lease.fencing_token}",
                )
            )
            return
        if isinstance(error, LeaseNotFoundError):
            self._lose(LeaseLost(LossReason.LEASE_DELETED, str(error)))
            return
        now = self._monotonic()
        with self._lock:
            if self._loss is not None or self._final is not None or self._stopping:
                return
            self._failures += 1
            failures = self._failures
            self._retry_at = now + self.timing.retry_interval_seconds
            deadline = self._deadline_locked()
        left = "unknown" if deadline is None else f"{deadline - now:.2f} s"
        log.warning(
            "renewing lease %s failed (try %d, local deadline in %s): %s",
            self.key,
            failures,
            left,
            error if error is not None else "no answer",
        )

    def renew_now(self) -> Result:
        """Renew once, now, in this thread; return when the answer came.

        The renewer thread does this on its own; call it only to refresh the
        deadline before a long step. A request that hangs blocks the caller
        (the renewer thread still enforces the deadline).

        Returns:
            The store's :class:`~leasehold.lease.store.Accepted` (the deadline moved
            to this request's start + window).

        Raises:
            LeaseLost: the renewal was refused or the lease is gone.
            TransientStoreError: the request failed; the deadline did not move.
            StoreError: any other refusal.
        """
        self._raise_if_over()
        with self._lock:
            deadline = self._deadline_locked()
        now = self._monotonic()
        answer_by = now + self.timing.window_seconds if deadline is None else deadline
        attempt = _Attempt(started_at=now, answer_by=answer_by)
        self._send_renew(attempt, answer_by)
        self._apply(attempt)
        if attempt.error is not None:
            if isinstance(attempt.error, LeaseNotFoundError):
                self._raise_if_over()
            raise attempt.error
        assert attempt.result is not None
        if isinstance(attempt.result, Rejected):
            self._raise_if_over()
        return attempt.result

    def _raise_if_over(self) -> None:
        with self._lock:
            if self._loss is not None:
                raise self._loss.again()
            if self._final is not None:
                raise LeaseLost(LossReason.ENDED, f"{self.key} was completed or released")

    def start(self) -> LeaseHolder:
        """Start renewing in the background (idempotent).

        Without ``acquired_at`` (push mode), first renews in this thread
        until a renewal succeeds, retrying transient errors for at most one
        window (``duration - margin``): only then is a deadline known.

        Returns:
            ``self``.

        Raises:
            LeaseLost: the lease was lost, ended, or could not be confirmed.
            RuntimeError: the holder was stopped.
        """
        with self._lock:
            if self._started:
                return self
            if self._stopping:
                raise RuntimeError(f"the holder of {self.key} was stopped")
            confirmed = self._last_ok_start is not None
        self._raise_if_over()
        if not confirmed:
            self._confirm()
            self.check()  # a confirmation that took longer than the window is no good
        with self._lock:
            self._started = True
            deadline = self._deadline_locked()
            assert deadline is not None
        self._thread = threading.Thread(
            target=self._renew_loop, name=f"leasehold-renewer-{self.lease_name}", daemon=True
        )
        self._thread.start()
        log.info(
            "holding lease %s as %s with fencing token %s (duration %g s, renew every %.3g s,"
            " local deadline in %.3g s)",
            self.key,
            self.holder_identity,
            self._token,
            self.timing.duration_seconds,
            self.timing.renew_interval_seconds,
            deadline - self._monotonic(),
        )
        return self

    def _confirm(self) -> None:
        """Renew until one renewal succeeds, within one window; raise LeaseLost if not."""
        give_up_at = self._monotonic() + self.timing.window_seconds
        last_error: BaseException | None = None
        while True:
            now = self._monotonic()
            if now >= give_up_at:
                raise LeaseLost(
                    LossReason.DEADLINE_PASSED,
                    f"could not renew {self.key} within {self.timing.window_seconds:.3g} s"
                    f" (last error: {last_error})",
                )
            attempt = self._launch(give_up_at)
            wait_for_event(attempt.done, give_up_at - self._monotonic())
            if not attempt.done.is_set():
                continue  # the loop gives up at give_up_at
            self._apply(attempt)
            self._raise_if_over()
            if isinstance(attempt.result, Accepted):
                self._adopt_lease_timing(attempt.result.lease.record.lease_duration_seconds)
                return
            last_error = attempt.error
            time.sleep(
                min(self.timing.retry_interval_seconds, max(0.0, give_up_at - self._monotonic()))
            )

    def _adopt_lease_timing(self, lease_duration_seconds: float) -> None:
        """Time the window by the lease's own duration, whatever the pod was told.

        The operator judges expiry by the JobLease's ``leaseDurationSeconds``
        (immutable); the duration in the environment is only a first guess.
        A longer guess would let this worker work on after a reclaim.

        Args:
            lease_duration_seconds: the duration the lease record carries.
        """
        if lease_duration_seconds == self.timing.duration_seconds:
            return
        log.warning(
            "lease %s lasts %g s, not the %g s this worker was given: using the lease's",
            self.key,
            lease_duration_seconds,
            self.timing.duration_seconds,
        )
        fraction, margin = self._timing_args
        if margin is not None and margin >= lease_duration_seconds:
            margin = None  # a margin meant for a longer lease: the default fits
        timing = LeaseTiming.for_duration(
            lease_duration_seconds, renew_fraction=fraction, margin_seconds=margin
        )
        with self._lock:
            self.timing = timing

    def _renew_loop(self) -> None:
        """The renewer thread: renew on schedule; declare loss at the deadline."""
        while True:
            with self._lock:
                if self._loss is not None or self._final is not None or self._stopping:
                    return
                attempt = self._attempt
                if attempt is not None and attempt.done.is_set():
                    self._attempt = None
            if attempt is not None and attempt.done.is_set():
                self._apply(attempt)
                continue
            with self._lock:
                deadline = self._deadline_locked()
                next_renew = self._next_renew_locked()
                in_flight = self._attempt is not None
            assert deadline is not None
            now = self._monotonic()
            if now >= deadline:
                self._lose(
                    LeaseLost(
                        LossReason.DEADLINE_PASSED,
                        "no successful renewal in time"
                        + (" (a renew request is still in flight)" if in_flight else ""),
                    )
                )
                return
            if not in_flight and now >= next_renew:
                # The per-request timeout ends at the deadline: an answer
                # after it would be worthless.
                new_attempt = self._launch(deadline)
                with self._lock:
                    self._attempt = new_attempt
                continue
            wake_at = deadline if in_flight else min(deadline, next_renew)
            wait_for_event(self._wake, wake_at - now)
            self._wake.clear()

    def stop(self) -> None:
        """Stop renewing, without writing anything (idempotent).

        The lease stays held until the operator reclaims it; prefer
        :meth:`complete` or :meth:`release`. A renewal in flight may still
        land; its answer is ignored.
        """
        with self._lock:
            self._stopping = True
            self._wake.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            join_thread(thread, 1.0)

    def close(self, wait_seconds: float = 1.0) -> None:
        """Stop renewing, let requests in flight end, close the client built here.

        A renew request still in flight ends at its timeout (the deadline,
        when the store takes a timeout). Waiting for it, a little past that
        and at most ``wait_seconds``, lets a process exit without a daemon
        thread waking inside the TLS library while the interpreter shuts
        down (which can abort the process).

        Args:
            wait_seconds: the longest wait for requests in flight (seconds).
        """
        self.stop()
        give_up_at = self._monotonic() + wait_seconds
        with self._lock:
            in_flight = list(self._in_flight)
        for attempt in in_flight:
            until = min(give_up_at, attempt.answer_by + 0.05)
            wait_for_event(attempt.done, until - self._monotonic())
        api_client, self._owned_api_client = self._owned_api_client, None
        if api_client is not None:
            api_client.close()

    # -- ending ----------------------------------------------------------

    def complete(
        self, outcome: Outcome, *, message: str = "", exit_code: int | None = None
    ) -> Result:
        """Stop renewing, then record the job's completion under this token.

        Idempotent from the caller's view: once a completion or release went
        through this holder, later calls return that first result without
        writing; a completion whose reply was lost and that is retried is
        recognised (the recorded completion carries this holder and token)
        and reported as accepted. The store fences the write (holder + token
        tests), so it is attempted even after a loss was noticed.

        Args:
            outcome: succeeded or failed.
            message: free text recorded with the completion.
            exit_code: the worker's exit code, if any.

        Returns:
            :class:`~leasehold.lease.store.Accepted`, or
            :class:`~leasehold.lease.store.Rejected` (``STALE_TOKEN``,
            ``NOT_HOLDER``, ``COMPLETED`` by someone else): the lease was
            lost, the holder's ``lost`` event is set.

        Raises:
            TransientStoreError: the write kept failing (tried
                ``1 + len(FINAL_WRITE_DELAYS)`` times); calling again retries.
            StoreError: any other refusal.
        """

        def write(timeout: float) -> Result:
            method = self._store.complete
            return method(
                self.namespace,
                self.lease_name,
                self.holder_identity,
                self._token,
                outcome,
                message=message,
                exit_code=exit_code,
                **_timeout_kwargs(timeout),
            )

        def ours(result: Rejected, retried: bool) -> bool:
            done = result.lease.record.completion
            return (
                result.rejection is Rejection.COMPLETED
                and done is not None
                and done.fencing_token == self._token
                and done.holder_identity == self.holder_identity
            )

        return self._final_write("complete", write, ours)

    def release(self) -> Result:
        """Stop renewing, then give the lease back (token kept).

        The operator can then start another attempt without waiting for
        expiry. Idempotent from the caller's view, like :meth:`complete`: a
        retried release that finds the lease unheld under this token reports
        accepted.

        Returns:
            :class:`~leasehold.lease.store.Accepted`, or
            :class:`~leasehold.lease.store.Rejected` if the lease was no longer
            this holder's.

        Raises:
            TransientStoreError: the write kept failing; calling again retries.
            StoreError: any other refusal.
        """

        def write(timeout: float) -> Result:
            method = self._store.release
            return method(
                self.namespace,
                self.lease_name,
                self.holder_identity,
                self._token,
                **_timeout_kwargs(timeout),
            )

        def ours(result: Rejected, retried: bool) -> bool:
            record = result.lease.record
            return (
                retried
                and result.rejection is Rejection.NOT_HOLDER
                and record.holder_identity is None
                and record.completion is None
                and record.fencing_token == self._token
            )

        return self._final_write("release", write, ours)

    def _final_write(
        self,
        action: str,
        write: Callable[[float], Result],
        ours: Callable[[Rejected, bool], bool],
    ) -> Result:
        """Stop renewing, write with retries, remember the first result."""
        with self._lock:
            if self._final is not None:
                return self._final
        self.stop()
        delays = iter(FINAL_WRITE_DELAYS)
        while True:
            with self._lock:
                retried = self._final_tried
                self._final_tried = True
            try:
                result = write(FINAL_WRITE_TIMEOUT_SECONDS)
                break
            except _RETRYABLE as exc:
                delay = next(delays, None)
                if delay is None:
                    if isinstance(exc, TransientStoreError):
                        raise
                    raise TransientStoreError(f"{action} {self.key}: {exc}") from exc
                log.warning(
                    "%s of lease %s failed, retrying in %g s: %s", action, self.key, delay, exc
                )
                time.sleep(delay)
        if isinstance(result, Rejected) and ours(result, retried):
            result = Accepted(result.lease)
        if isinstance(result, Rejected):
            self._lose(
                LeaseLost(
                    result.rejection,
                    f"{action} refused; lease held by"
                    f" {result.lease.record.holder_identity or 'nobody'}"
                    f" with token {result.lease.record.fencing_token}",
                )
            )
        else:
            log.info("lease %s: %s accepted (token %s)", self.key, action, self._token)
        with self._lock:
            if self._final is None:
                self._final = result
            return self._final

    # -- usage styles ----------------------------------------------------

    def __enter__(self) -> LeaseHolder:
        """Start renewing (see :meth:`start`)."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop renewing; give the lease back if the block neither completed nor lost it.

        Releasing (rather than waiting for expiry) lets the operator start the
        next attempt at once. Errors of that release are logged, not raised,
        so they do not hide the block's own exception.
        """
        try:
            with self._lock:
                settled = self._final is not None or self._loss is not None
            if not settled:
                try:
                    self.release()
                except Exception:
                    log.exception("releasing lease %s on exit failed", self.key)
        finally:
            self.close()

    def run(self, fn: Callable[[LeaseHolder], T]) -> T:
        """Run ``fn(holder)`` under the lease and record how it ended.

        Starts renewing, calls ``fn``, completes with ``Succeeded`` when it
        returns or ``Failed`` (message: the exception) when it raises
        anything but :class:`LeaseLost`. ``fn`` must call :meth:`check`
        before each effect: sync code is not interrupted.

        Args:
            fn: the work; takes the holder, returns anything.

        Returns:
            What ``fn`` returned.

        Raises:
            LeaseLost: the lease was lost (during ``fn`` or at completion).
            Exception: whatever ``fn`` raised (after the ``Failed`` completion).
        """
        with self:
            try:
                value = fn(self)
            except LeaseLost:
                raise
            except Exception as exc:
                try:
                    self.complete(Outcome.FAILED, message=f"{type(exc).__name__}: {exc}")
                except Exception:
                    log.exception("recording the failure of lease %s failed", self.key)
                raise
            result = self.complete(Outcome.SUCCEEDED)
            if isinstance(result, Rejected):
                raise LeaseLost(result.rejection, "completion refused")
            return value

    @contextlib.asynccontextmanager
    async def guard(self) -> AsyncIterator[LeaseHolder]:
        """Cancel the task running the block when the lease is lost.

        Usage::

            with holder:                       # renewing
                async with holder.guard():     # cancelled on loss
                    await do_work(holder.token)
                holder.complete(Outcome.SUCCEEDED)

        The loss is noticed in the renewer thread; the task is cancelled on
        its event loop (``call_soon_threadsafe``) and the resulting
        ``CancelledError`` is turned into :class:`LeaseLost` at the block's
        end (the task's cancellation is undone, so the task itself goes on).
        A block that finished before the cancellation ran is not disturbed.

        Yields:
            The holder.

        Raises:
            LeaseLost: the lease was lost before or during the block.
        """
        self.check()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("LeaseHolder.guard() must run inside an asyncio task")
        loop = asyncio.get_running_loop()
        inside = True
        cancelled_for: LeaseLost | None = None

        def cancel(loss: LeaseLost) -> None:  # runs on the loop
            nonlocal cancelled_for
            if inside and cancelled_for is None:
                cancelled_for = loss
                task.cancel(msg=f"lease lost: {loss}")

        def on_loss(loss: LeaseLost) -> None:  # runs in the renewer thread
            with contextlib.suppress(RuntimeError):  # loop closed: nothing to cancel
                loop.call_soon_threadsafe(cancel, loss)

        remove = self.add_loss_callback(on_loss)
        try:
            yield self
        except asyncio.CancelledError as exc:
            if cancelled_for is not None:
                task.uncancel()
                raise cancelled_for.again() from exc
            raise
        finally:
            inside = False
            remove()


# --------------------------------------------------------------------------
# Pull mode


def claim(
    namespace: str,
    lease_name: str,
    holder_identity: str,
    *,
    store: LeaseOperations | None = None,
    renew_fraction: float = DEFAULT_RENEW_FRACTION,
    margin_seconds: float | None = None,
    on_lost: LossCallback | None = None,
    observed: StoredLease | None = None,
) -> LeaseHolder | None:
    """Claim a lease for this worker (pull mode) and start renewing it.

    Without ``observed`` the store reads the lease, then writes (GET +
    PATCH). With ``observed`` (the lease as this worker last saw it, e.g. from
    :meth:`LeaseStore.list_leases` or a watch) the claim is one PATCH when
    ``observed`` is still current, and falls back to reading when it is not:
    see :meth:`LeaseStore.claim`.

    Args:
        namespace: the lease's namespace.
        lease_name: the JobLease's name.
        holder_identity: this worker's identity (e.g. ``host:pid``).
        store: the lease store, or ``None`` to build one on
            :func:`~leasehold.lease.kubeclient.new_api_client` (closed with the
            holder).
        renew_fraction: see :class:`LeaseHolder`.
        margin_seconds: see :class:`LeaseHolder`.
        on_lost: see :class:`LeaseHolder`.
        observed: the lease as last seen, or ``None`` (read it first). A
            stale one costs a read, never a wrong result.

    Returns:
        A started :class:`LeaseHolder` (its first deadline counts from the
        start of the claim request), or ``None`` when someone else holds the
        lease or its job is completed.

    Raises:
        LeaseNotFoundError: no such lease.
        TransientStoreError: retry later.
        StoreError: any other refusal.
    """
    api_client: Any = None  # built here, owned by the holder
    if store is None:
        api_client = new_api_client()
        store = LeaseStore(api_client)
    try:
        started = time.monotonic()
        # Pass `observed` only when there is one: a store written against the
        # older LeaseOperations (no `observed` keyword) keeps working here.
        if observed is None:
            result = store.claim(namespace, lease_name, holder_identity)
        else:
            result = store.claim(namespace, lease_name, holder_identity, observed=observed)
        if isinstance(result, Rejected):
            log.info("lease %s/%s not claimed: %s", namespace, lease_name, result.rejection)
            if api_client is not None:
                api_client.close()
            return None
        holder = LeaseHolder(
            store,
            namespace,
            lease_name,
            holder_identity,
            result.token,
            result.lease.record.lease_duration_seconds,
            job_name=result.lease.record.job_name,
            renew_fraction=renew_fraction,
            margin_seconds=margin_seconds,
            acquired_at=started,
            on_lost=on_lost,
        )
    except BaseException:
        if api_client is not None:
            api_client.close()
        raise
    holder._owned_api_client = api_client
    return holder.start()


def _list_leases(
    store: LeaseOperations, namespace: str, label_selector: str | None
) -> list[StoredLease]:
    """All JobLeases of a namespace, oldest first."""
    leases = store.list_leases(namespace, label_selector=label_selector)

    def age(lease: StoredLease) -> tuple[str, str]:
        meta = lease.body.get("metadata", {})
        return (str(meta.get("creationTimestamp", "")), lease.name)

    return sorted(leases, key=age)


def claim_any(
    namespace: str,
    holder_identity: str,
    label_selector: str | None = None,
    *,
    store: LeaseOperations | None = None,
    renew_fraction: float = DEFAULT_RENEW_FRACTION,
    margin_seconds: float | None = None,
    on_lost: LossCallback | None = None,
) -> LeaseHolder | None:
    """Claim the first free lease of a namespace (pull mode).

    Lists the JobLeases (oldest first), skips held and completed ones, and
    tries to claim each free one until a claim succeeds; a lease taken by
    another worker meanwhile is skipped. Each claim is judged on the listed
    lease (``observed``), so it is one PATCH unless the lease changed since
    the list (then the store reads it and judges again).

    Requests: one LIST, then one PATCH per lease tried (plus a GET, and
    maybe a PATCH, for each lease that changed since the list).

    Args:
        namespace: where to look.
        holder_identity: this worker's identity.
        label_selector: only leases matching it (e.g. ``pool=gpu``).
        store: the lease store, or ``None`` to build one (closed with the
            holder).
        renew_fraction: see :class:`LeaseHolder`.
        margin_seconds: see :class:`LeaseHolder`.
        on_lost: see :class:`LeaseHolder`.

    Returns:
        A started :class:`LeaseHolder`, or ``None`` when no lease was free.

    Raises:
        TransientStoreError: retry later.
        StoreError: any other refusal.
    """
    api_client: Any = None  # built here, owned by the holder
    if store is None:
        api_client = new_api_client()
        store = LeaseStore(api_client)
    try:
        for lease in _list_leases(store, namespace, label_selector):
            cap = lease.record.max_fencing_token
            exhausted = cap is not None and lease.record.fencing_token >= cap
            if lease.record.held or lease.record.completion is not None or exhausted:
                continue
            try:
                holder = claim(
                    namespace,
                    lease.name,
                    holder_identity,
                    store=store,
                    renew_fraction=renew_fraction,
                    margin_seconds=margin_seconds,
                    on_lost=on_lost,
                    observed=lease,
                )
            except LeaseNotFoundError:
                continue
            if holder is not None:
                holder._owned_api_client = api_client
                api_client = None
                return holder
        return None
    finally:
        if api_client is not None:
            api_client.close()
