"""The holder of a lease: the worker's view of it, from the first renewal to complete or release.

Why this module exists: a worker must stop producing effects *before* the
operator may hand its job to someone else (docs/architecture.md, "How expiry
is judged"). :class:`LeaseHolder` renews in
the background (:class:`~leasehold.worker.renewer.Renewer`), turns a refused
renewal, a deleted lease or a passed local deadline into :class:`LeaseLost`,
and writes the job's end.

Python threads cannot be interrupted safely, so **sync code must call**
:meth:`LeaseHolder.check` **right before every effect** and pass
:attr:`LeaseHolder.token` to fenced targets; async code can use
:meth:`LeaseHolder.guard`, which cancels its block on loss. A lease is
temporary ownership, not exactly-once: a worker can lose its lease after an
effect left it and before it completes, so effects outside the store must be
fenced at the target (docs/fencing.md).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import Any, Final, TypeVar

from leasehold import fencing
from leasehold.lease.errors import LeaseNotFoundError, TransientStoreError
from leasehold.lease.leaseops import Accepted, LeaseOperations, Rejected, Result, StoredLease
from leasehold.lease.protocol import (
    FencingToken,
    HolderIdentity,
    MonotonicClock,
    Outcome,
    Rejection,
    check_holder,
)
from leasehold.names import (
    ENV_COMPLETION_INDEX,
    ENV_FENCING_TOKEN,
    ENV_HOLDER,
    ENV_JOB,
    ENV_LEASE,
    ENV_LEASE_DURATION,
    ENV_NAMESPACE,
    ENV_POD_UID,
)
from leasehold.worker.connection import StoreScope
from leasehold.worker.errors import LeaseEnvironmentError, LeaseLost, LossReason
from leasehold.worker.renewer import Renewer
from leasehold.worker.timing import DEFAULT_RENEW_FRACTION, LeaseTiming

log = logging.getLogger(__name__)

T = TypeVar("T")

FINAL_WRITE_DELAYS: Final = (0.5, 1.0, 2.0)
"""Back-off (seconds) between tries of a completion or release that failed
transiently; after the last one the error is raised."""

FINAL_WRITE_TIMEOUT_SECONDS: Final = 10.0
"""Per-request timeout of a completion or release."""

_RETRYABLE: Final = (TransientStoreError, OSError)
"""Errors after which a write may be tried again (the store converts client
timeouts and dropped connections to :class:`TransientStoreError`)."""

LossCallback = Callable[[LeaseLost], object]
"""Called once when a lease is lost, with the :class:`LeaseLost` describing why."""


class LeaseHolder:
    """The holder of an already-claimed lease: renews it and notices its loss.

    Build one with :meth:`from_env` (push mode: the operator claimed for this
    pod), :func:`~leasehold.worker.claim` / :func:`~leasehold.worker.claim_any`
    (pull mode), or directly. Then :meth:`start` it (``with holder:`` does),
    call :meth:`check` before every effect, and end with :meth:`complete` (or
    :meth:`release` to give the job back).

    ``store`` is a :class:`~leasehold.lease.store.LeaseStore` (or a
    :class:`~leasehold.worker.connection.StoreScope`, which :meth:`close`
    then closes). ``acquired_at`` is the monotonic time taken right before
    the claim request, if this process made it; ``None`` (push mode: the
    claim happened elsewhere, at a time this process cannot know) makes
    :meth:`start` renew once first. ``renew_fraction`` and ``margin_seconds``
    shape the :class:`~leasehold.worker.timing.LeaseTiming`; ``on_lost`` is
    called once on loss; ``monotonic`` is the clock (injected for tests);
    ``params`` is the job's input, from the lease a pull-mode claim took.

    Thread-safe. ``on_lost`` runs in the renewer thread, or in the thread
    whose :meth:`check` noticed the deadline passing.

    Raises:
        ValueError: bad timing values (see :meth:`LeaseTiming.for_duration`).
    """

    def __init__(
        self,
        store: LeaseOperations | StoreScope,
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
        holder_uid: str | None = None,
        params: dict[str, Any] | None = None,
        completion_index: int | None = None,
    ) -> None:
        self.namespace = namespace
        self.params = params
        """The job's ``spec.params`` (its input) as the claim read it from the lease;
        ``None`` when it has none or the holder was not made by a claim (push mode)."""
        self.completion_index = completion_index
        """An Indexed job's completion index (its own lease and fencing domain), else ``None``:
        part of :meth:`effect_key` and of the fences' resource keys."""
        self.holder_uid = holder_uid
        """This pod's ``metadata.uid`` when the holder is a pod: the lease is bound
        to it, so a pod that replaced this one under the same name is not the holder."""
        self._uid: dict[str, Any] = {"holder_uid": holder_uid} if holder_uid else {}
        self.lease_name = lease_name
        self.holder_identity = HolderIdentity(holder_identity)
        self.job_name = job_name
        self.timing = LeaseTiming.for_duration(
            lease_duration_seconds, renew_fraction=renew_fraction, margin_seconds=margin_seconds
        )
        self._timing_args = (renew_fraction, margin_seconds)
        self.lost = threading.Event()
        """Set once the lease is lost (never for this holder's own complete/release)."""
        self._scope = store if isinstance(store, StoreScope) else StoreScope(store)
        self._store = self._scope.store
        self._token = FencingToken(token)
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._loss: LeaseLost | None = None
        self._listeners: list[LossCallback] = [on_lost] if on_lost is not None else []
        self._started = False
        self._stopping = False
        self._final: Result | None = None
        self._final_tried = False
        self._renewer = Renewer(
            self._renew_request,
            self.timing,
            key=self.key,
            acquired_at=acquired_at,
            on_loss=self._lose,
            monotonic=monotonic,
            bound=self._bound_now if callable(getattr(self._store, "get", None)) else None,
        )

    @classmethod
    def from_env(
        cls,
        *,
        store: LeaseOperations | None = None,
        environ: Mapping[str, str] | None = None,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        margin_seconds: float | None = None,
        on_lost: LossCallback | None = None,
        http_client: bool = False,
    ) -> LeaseHolder:
        """Build the holder of the lease the operator claimed for this pod; not started.

        Reads ``LEASEHOLD_NAMESPACE``, ``LEASEHOLD_LEASE``,
        ``LEASEHOLD_HOLDER``, ``LEASEHOLD_FENCING_TOKEN``,
        ``LEASEHOLD_LEASE_DURATION_SECONDS`` and (optional) ``LEASEHOLD_JOB``,
        ``LEASEHOLD_COMPLETION_INDEX`` (an Indexed job's index)
        from ``environ`` (default ``os.environ``). Without ``store`` one is
        built on a new API client, which :meth:`close` closes: the
        ``kubernetes`` package's, or with ``http_client`` the standard
        library's (:meth:`StoreScope.open_http`, what ``leasehold run`` uses).

        Raises:
            LeaseEnvironmentError: a variable is missing or malformed.
            kubernetes.config.ConfigException: no store given and no cluster
                configuration found (with ``http_client``:
                ``leasehold.lease.httpclient.ClusterConfigError``).
        """
        env = os.environ if environ is None else environ
        required = (ENV_NAMESPACE, ENV_LEASE, ENV_HOLDER, ENV_FENCING_TOKEN, ENV_LEASE_DURATION)
        missing = [name for name in required if not env.get(name, "").strip()]
        if missing:
            raise LeaseEnvironmentError(
                f"not set: {', '.join(missing)} (the operator sets them in the pods it starts)"
            )
        try:
            token = int(env[ENV_FENCING_TOKEN].strip())
            duration = float(env[ENV_LEASE_DURATION].strip())
            raw_index = env.get(ENV_COMPLETION_INDEX, "").strip()
            index = int(raw_index) if raw_index else None
        except ValueError as exc:
            raise LeaseEnvironmentError(f"malformed lease environment: {exc}") from exc
        if token < 1:
            raise LeaseEnvironmentError(f"{ENV_FENCING_TOKEN} must be >= 1, got {token}")
        if not (duration > 0 and math.isfinite(duration)):
            raise LeaseEnvironmentError(f"{ENV_LEASE_DURATION} must be > 0, got {duration}")
        scope = StoreScope.open_http() if http_client and store is None else StoreScope.open(store)
        try:
            return cls(
                scope,
                env[ENV_NAMESPACE].strip(),
                env[ENV_LEASE].strip(),
                env[ENV_HOLDER].strip(),
                token,
                duration,
                job_name=env.get(ENV_JOB) or None,
                renew_fraction=renew_fraction,
                margin_seconds=margin_seconds,
                on_lost=on_lost,
                holder_uid=env.get(ENV_POD_UID, "").strip() or None,
                completion_index=index,
            )
        except ValueError as exc:
            scope.close()
            raise LeaseEnvironmentError(str(exc)) from exc

    # -- state -----------------------------------------------------------

    @property
    def token(self) -> FencingToken:
        """The fencing token to send with every effect (targets reject lower ones)."""
        return self._token

    @property
    def key(self) -> str:
        """``namespace/name`` of the lease, for messages."""
        return f"{self.namespace}/{self.lease_name}"

    @property
    def deadline(self) -> float | None:
        """The local deadline (on the holder's monotonic clock), ``None`` before the first."""
        return self._renewer.deadline

    @property
    def confirm_requests(self) -> dict[str, int]:
        """What :meth:`start` sent to confirm the lease.

        ``tries``: renew requests; ``reads``: reads while the claim had not landed.
        """
        return {"tries": self._renewer.confirm_tries, "reads": self._renewer.confirm_reads}

    @property
    def loss(self) -> LeaseLost | None:
        """Why the lease was lost, or ``None`` while it is held."""
        with self._lock:
            return self._loss

    def remaining_seconds(self) -> float:
        """Seconds left before the local deadline (``>= 0``).

        ``0.0`` once the lease is lost, ended, past its deadline or before
        its first deadline is known.
        """
        deadline = self._renewer.deadline
        with self._lock:
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
        self._raise_if_over()
        deadline = self._renewer.deadline
        with self._lock:
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

    def _raise_if_over(self) -> None:
        with self._lock:
            if self._loss is not None:
                raise self._loss.again()
            if self._final is not None:
                raise LeaseLost(LossReason.ENDED, f"{self.key} was completed or released")

    def add_loss_callback(self, callback: LossCallback) -> Callable[[], None]:
        """Call ``callback`` (must not block) once when the lease is lost, at once if it is.

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
        """Record the loss once; stop renewing; call the callbacks."""
        with self._lock:
            if self._loss is not None or self._final is not None:
                return
            self._loss = loss
            listeners = list(self._listeners)
            self._listeners.clear()
        self._renewer.halt()
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

    # -- fencing: the token, in the form each kind of target takes -------

    def effect_key(self, step: str) -> str:
        """Return the idempotency key of one effect of this attempt, e.g. ``ns/payout/8/charge``."""
        job = self.job_name or self.lease_name
        return fencing.idempotency_key(
            f"{self.namespace}/{job}", self._token, step, index=self.completion_index
        )

    def fence_resource(self, resource: str) -> str:
        """The fence's key for ``resource``: keyed per index for an Indexed job's attempt."""
        return fencing.index_resource(resource, self.completion_index)

    def fencing_headers(self, resource: str, step: str | None = None) -> dict[str, str]:
        """Return HTTP headers for :class:`~leasehold.fencing.http.FencingMiddleware`.

        ``step`` names the effect, for an ``Idempotency-Key`` header.
        """
        from leasehold.fencing import http as http_fencing  # asyncio: not at start-up

        key = self.effect_key(step) if step is not None else None
        return http_fencing.fencing_headers(self._token, self.fence_resource(resource), key)

    def sql_params(self, resource: str, step: str | None = None) -> dict[str, Any]:
        """Return named parameters for :data:`leasehold.fencing.postgres.FENCE_SQL`."""
        from leasehold.fencing import postgres  # needs the [postgres] extra

        key = self.effect_key(step) if step is not None else None
        return dict(postgres.sql_params(self._token, self.fence_resource(resource), key))

    def annotate(self, body: dict[str, Any]) -> dict[str, Any]:
        """Put the fencing-token annotation on ``body`` (in place) and return it."""
        from leasehold.fencing import kube as kube_fencing

        return kube_fencing.annotate(body, self._token)

    # -- renewing --------------------------------------------------------

    def _renew_request(self, timeout: float) -> Result:
        return self._store.renew(
            self.namespace,
            self.lease_name,
            self.holder_identity,
            self._token,
            request_timeout=timeout,
            **self._uid,
        )

    def _bound_now(self, timeout: float) -> bool:
        """Read the lease (no write): ``False`` while not yet bound to this holder.

        Not found is "not yet" too: a job's first lease is created held by
        its pod after the pod (only :meth:`Renewer.confirm
        <leasehold.worker.renewer.Renewer.confirm>` asks, at start-up).
        """
        read: Callable[..., StoredLease] = getattr(self._store, "get")  # noqa: B009
        try:
            lease = read(self.namespace, self.lease_name, request_timeout=timeout)
        except LeaseNotFoundError:
            return False
        waiting = check_holder(lease.record, self.holder_identity, self._token, self.holder_uid)
        return waiting is not Rejection.NOT_BOUND

    def renew_now(self) -> Result:
        """Renew once, now, in this thread: to refresh the deadline before a long step.

        Returns:
            The store's :class:`~leasehold.lease.leaseops.Accepted` (the deadline
            moved to this request's start + window).

        Raises:
            LeaseLost: the renewal was refused or the lease is gone.
            TransientStoreError: the request failed; the deadline did not move.
            StoreError: any other refusal.
        """
        self._raise_if_over()
        attempt = self._renewer.renew_once()
        if attempt.error is not None:
            self._raise_if_over()
            raise attempt.error
        assert attempt.result is not None
        if isinstance(attempt.result, Rejected):
            self._raise_if_over()
        return attempt.result

    def start(self) -> LeaseHolder:
        """Start renewing in the background (idempotent); return ``self``.

        Without ``acquired_at`` (push mode), first renews in this thread
        until a renewal succeeds, retrying transient errors for at most a
        lease duration and the start grace (:meth:`Renewer.confirm`): only
        then is a deadline known.

        Raises:
            LeaseLost: the lease was lost, ended, or could not be confirmed.
            RuntimeError: the holder was stopped.
        """
        with self._lock:
            if self._started:
                return self
            if self._stopping:
                raise RuntimeError(f"the holder of {self.key} was stopped")
        self._raise_if_over()
        if self._renewer.deadline is None:
            confirmed = self._renewer.confirm()
            self._adopt_lease_timing(confirmed.lease.record.lease_duration_seconds)
            self.check()  # a confirmation that took longer than the window is no good
        with self._lock:
            self._started = True
        deadline = self._renewer.deadline
        assert deadline is not None
        self._renewer.start()
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
        self._renewer.retime(timing)

    def stop(self) -> None:
        """Stop renewing, without writing anything (idempotent).

        The lease stays held until the operator reclaims it; prefer
        :meth:`complete` or :meth:`release`. A renewal in flight may still
        land; its answer is ignored.
        """
        with self._lock:
            self._stopping = True
        self._renewer.stop()

    def close(self, wait_seconds: float = 1.0) -> None:
        """Stop renewing, wait (at most ``wait_seconds``) for requests in flight, close the client.

        Only a client built for this holder (:meth:`from_env`, pull mode
        without a store) is closed.
        """
        self.stop()
        self._renewer.wait_in_flight(wait_seconds)
        self._scope.close()

    # -- ending ----------------------------------------------------------

    def complete(
        self, outcome: Outcome, *, message: str = "", exit_code: int | None = None
    ) -> Result:
        """Stop renewing, then record the job's completion under this token.

        Idempotent from the caller's view: later calls return the first
        result without writing, and a retried completion whose first reply
        was lost is recognised (the recorded completion carries this holder
        and token) and reported as accepted. The store fences the write, so
        it is attempted even after a loss was noticed.

        Returns:
            :class:`~leasehold.lease.leaseops.Accepted`, or
            :class:`~leasehold.lease.leaseops.Rejected` (the lease was lost;
            :attr:`lost` is set).

        Raises:
            TransientStoreError: the write kept failing (tried
                ``1 + len(FINAL_WRITE_DELAYS)`` times); calling again retries.
            StoreError: any other refusal.
        """

        def write(timeout: float) -> Result:
            return self._store.complete(
                self.namespace,
                self.lease_name,
                self.holder_identity,
                self._token,
                outcome,
                message=message,
                exit_code=exit_code,
                request_timeout=timeout,
                **self._uid,
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
        """Stop renewing, then give the lease back (token kept), like :meth:`complete`.

        The operator can then start another attempt without waiting for
        expiry. A retried release that finds the lease unheld under this
        token reports accepted.
        """

        def write(timeout: float) -> Result:
            return self._store.release(
                self.namespace,
                self.lease_name,
                self.holder_identity,
                self._token,
                request_timeout=timeout,
                **self._uid,
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
        """Run ``fn(holder)`` under the lease, complete with how it ended, return its value.

        ``Succeeded`` when ``fn`` returns, ``Failed`` (message: the exception)
        when it raises anything but :class:`LeaseLost`. ``fn`` must call
        :meth:`check` before each effect: sync code is not interrupted.

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

        Raises:
            LeaseLost: the lease was lost before or during the block.
        """
        import asyncio  # here: ``leasehold run`` never needs it (28 ms of its start-up)

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
