"""The writes a lease's holder sends, as JSON patches, and what they return; no client library.

Why this module exists: a holder's claim, renew, complete and release must be
the same request with the same ``test`` ops (the fence) whichever HTTP client
sends it: the operator's and the SDK's :class:`~leasehold.lease.store.LeaseStore`
on the ``kubernetes`` package, and ``leasehold run``'s
:class:`~leasehold.lease.httpclient.HttpLeaseClient` on the standard library,
which keeps that package (and pydantic) out of every job's start-up. The patches
and the retry-on-refusal logic live here once; a subclass supplies the
transport (:meth:`LeaseWriter._read`, :meth:`LeaseWriter._patch`). Beside it,
:class:`LeaseOperations` is the port the worker SDK types a store as. Nothing
here imports ``kubernetes`` or ``pydantic`` (an import-linter contract).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from leasehold.lease import protocol
from leasehold.lease.errors import TransientStoreError, WriteRefusedError
from leasehold.lease.protocol import (
    Completion,
    FencingToken,
    HolderIdentity,
    LeaseRecord,
    Outcome,
    Rejection,
)

log = logging.getLogger(__name__)

MAX_CONFLICT_RETRIES: Final = 16
"""How often an operation re-reads after a conflict before giving up."""

MAX_MESSAGE_LENGTH: Final = 1024
"""Longest completion message the JobLease schema takes (characters)."""


# --------------------------------------------------------------------------
# Outcomes


@dataclass(frozen=True)
class StoredLease:
    """A lease as read from (or written to) the API server.

    Attributes:
        namespace: the lease's namespace.
        name: the lease's name.
        record: the rules' view of it.
        resource_version: ``metadata.resourceVersion`` of this version.
        generation: ``metadata.generation`` (bumped by spec writes only).
        body: the raw object.
    """

    namespace: str
    name: str
    record: LeaseRecord
    resource_version: str
    generation: int
    body: dict[str, Any]

    @property
    def params(self) -> dict[str, Any] | None:
        """The job's ``spec.params`` as copied to the lease (pull mode's input), if any."""
        params = (self.body.get("spec") or {}).get("params")
        return dict(params) if isinstance(params, dict) else None

    @property
    def priority(self) -> int:
        """The job's ``spec.priority`` as copied to the lease (``0`` when absent)."""
        priority = (self.body.get("spec") or {}).get("priority")
        return priority if isinstance(priority, int) else 0


@dataclass(frozen=True)
class Accepted:
    """The write landed; ``lease`` is the server's answer to it."""

    lease: StoredLease

    @property
    def token(self) -> FencingToken:
        """The lease's fencing token after the write (for a claim: yours)."""
        return self.lease.record.fencing_token


@dataclass(frozen=True)
class Rejected:
    """The rules refused the write; nothing changed.

    Attributes:
        rejection: why; each method lists the ones it can return.
        lease: the lease as read when judging.
    """

    rejection: Rejection
    lease: StoredLease


Result = Accepted | Rejected
"""The outcome of one store operation."""


# --------------------------------------------------------------------------
# Conversion (pure: the API server has validated what it returns)


def parse_time(value: Any) -> datetime | None:
    """Parse a Kubernetes (Micro)Time string; ``None`` and datetimes pass through."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def format_time(value: datetime) -> str:
    """Format a time as Kubernetes MicroTime, e.g. ``"2026-11-30T06:18:29.123456Z"``.

    Naive datetimes are taken as UTC.
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _completion(body: Any) -> Completion | None:
    if not isinstance(body, dict):
        return None
    exit_code = body.get("exitCode")
    return Completion(
        fencing_token=FencingToken(int(body["fencingToken"])),
        holder_identity=HolderIdentity(str(body["holderIdentity"])),
        outcome=Outcome(body["outcome"]),
        complete_time=parse_time(body.get("completeTime")) or datetime.min.replace(tzinfo=UTC),
        message=str(body.get("message") or ""),
        exit_code=int(exit_code) if exit_code is not None else None,
    )


def _token(value: Any) -> FencingToken | None:
    return FencingToken(int(value)) if value is not None else None


def stored_from_body(body: dict[str, Any]) -> StoredLease:
    """Build a :class:`StoredLease` from a JobLease body the API server returned.

    No validation: the API server checked the body against the CRD's schema
    (:func:`leasehold.lease.store.to_stored` also validates, with the model).
    Absent fields take the schema's defaults.

    Raises:
        KeyError, ValueError, TypeError: a required field is missing or malformed.
    """
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    holder = spec.get("holderIdentity")
    record = LeaseRecord(
        job_name=str(spec["jobName"]),
        holder_identity=HolderIdentity(str(holder)) if holder else None,
        fencing_token=FencingToken(int(spec.get("fencingToken", 0))),
        lease_duration_seconds=int(spec.get("leaseDurationSeconds", 30)),
        acquire_time=parse_time(spec.get("acquireTime")),
        renew_time=parse_time(spec.get("renewTime")),
        completion=_completion(spec.get("completion")),
        max_fencing_token=_token(spec.get("maxFencingToken")),
        holder_uid=spec.get("holderUID"),
        job_uid=spec.get("jobUID"),
        base_fencing_token=FencingToken(int(spec.get("baseFencingToken", 0))),
        failures=int(spec.get("failures", 0)),
        last_failure=_completion(spec.get("lastFailure")),
        suspended=bool(spec.get("suspended", False)),
        suspensions=int(spec.get("suspensions", 0)),
        uncounted_attempts=int(spec.get("uncountedAttempts", 0)),
        last_uncounted_token=_token(spec.get("lastUncountedToken")),
        ceiling_fencing_token=_token(spec.get("ceilingFencingToken")),
    )
    return StoredLease(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        record=record,
        resource_version=str(meta.get("resourceVersion", "")),
        generation=int(meta.get("generation", 0)),
        body=body,
    )


# --------------------------------------------------------------------------
# Patches


def completion_body(completion: Completion) -> dict[str, Any]:
    """``spec.completion`` (or ``spec.lastFailure``) as the API takes it."""
    body: dict[str, Any] = {
        "fencingToken": completion.fencing_token,
        "holderIdentity": completion.holder_identity,
        "outcome": str(completion.outcome),
        "completeTime": format_time(completion.complete_time),
    }
    if completion.message:
        body["message"] = completion.message[:MAX_MESSAGE_LENGTH]
    if completion.exit_code is not None:
        body["exitCode"] = completion.exit_code
    return body


def holder_tests(holder: HolderIdentity, token: FencingToken) -> list[dict[str, Any]]:
    """The fence of a holder's write: ``test`` ops on its identity and token."""
    return [
        {"op": "test", "path": "/spec/holderIdentity", "value": holder},
        {"op": "test", "path": "/spec/fencingToken", "value": token},
    ]


UNBIND: Final[dict[str, Any]] = {"op": "add", "path": "/spec/holderUID", "value": None}
"""Remove ``spec.holderUID`` whether or not it is there: the API server prunes a
null from a field that is not nullable, where a JSON patch ``remove`` of an
absent path would fail."""


def bind_op(holder_uid: str) -> dict[str, Any]:
    """Bind the lease to the holder's pod, or confirm it: the CRD refuses a change."""
    return {"op": "add", "path": "/spec/holderUID", "value": holder_uid}


def uid_test(holder_uid: str) -> dict[str, Any]:
    """A ``test`` op: the lease is bound to the pod ``holder_uid``."""
    return {"op": "test", "path": "/spec/holderUID", "value": holder_uid}


def claim_ops(
    judged_token: FencingToken, new: LeaseRecord, job_uid: str | None = None
) -> list[dict[str, Any]]:
    """The JSON patch of a claim judged on a lease at ``judged_token``.

    It binds the claimant's pod (``new.holder_uid``) in the same write, if
    any, and with ``job_uid`` tests that the lease still serves that job
    incarnation (a take-over keeps the token: the token test alone would let
    a claim judged before it land for the new incarnation).

    Deliberately no ``resourceVersion`` precondition. The API server applies a
    JSON patch inside its own compare-and-swap and evaluates the ``test`` op and
    the CRD's CEL rules against the very version it replaces, so the write is
    atomic without one, and it checks exactly what
    :func:`leasehold.lease.protocol.claim` checks:

    * the ``test`` on ``/spec/fencingToken``: no claim landed since the judged
      one (every claim bumps the token);
    * CEL "a fencing token bump is a claim": a held lease is never taken
      (``LOST_RACE``);
    * CEL "a completed lease can never be claimed or held again" (``COMPLETED``);
    * CEL "spec.fencingToken cannot pass spec.maxFencingToken", on the cap as
      stored now (``EXHAUSTED``);
    * CEL "may only stay the same or go up by exactly one": token + 1.

    The other CEL rules concern fields a claim does not write. Any other change
    in between (the operator's status, a renewTime, labels) does not bear on the
    claim; a ``resourceVersion`` precondition would turn each into a spurious
    409 and an extra GET + PATCH.
    """
    assert new.acquire_time is not None  # set by protocol.claim
    assert new.holder_identity is not None
    acquired = format_time(new.acquire_time)
    tests = [{"op": "test", "path": "/spec/fencingToken", "value": judged_token}]
    if job_uid is not None:
        tests.append({"op": "test", "path": "/spec/jobUID", "value": job_uid})
    return [
        *tests,
        {"op": "add", "path": "/spec/holderIdentity", "value": new.holder_identity},
        {"op": "replace", "path": "/spec/fencingToken", "value": new.fencing_token},
        {"op": "add", "path": "/spec/acquireTime", "value": acquired},
        {"op": "add", "path": "/spec/renewTime", "value": acquired},
        bind_op(new.holder_uid) if new.holder_uid else UNBIND,
    ]


# --------------------------------------------------------------------------
# The holder's writes


def utcnow() -> datetime:
    """The wall clock, in UTC (the default clock)."""
    return datetime.now(UTC)


class LeaseOperations(Protocol):
    """The lease operations a worker needs: the port the worker SDK types its store as.

    Each method is the :class:`LeaseWriter` method of the same name, but
    ``list_leases``, which each transport adds
    (:class:`~leasehold.lease.store.LeaseStore` and
    :class:`~leasehold.lease.httpclient.HttpLeaseClient` both satisfy this). A
    port rather than :class:`LeaseWriter` itself: a worker's store need not be
    one (the unit tests pass fakes). ``request_timeout`` (seconds) bounds one
    API request, so a renewal that hangs cannot run past the holder's deadline;
    ``observed`` (the lease as the caller last saw it) only saves a read. A
    worker that is a pod (``LEASEHOLD_POD_UID`` set) also passes
    ``holder_uid=`` to claim, renew, complete and release, as
    :class:`LeaseWriter` takes it; a store used without a pod UID need not
    accept it.
    """

    def claim(
        self,
        namespace: str,
        name: str,
        claimant: str,
        *,
        observed: StoredLease | None = None,
    ) -> Result:
        """Claim an unheld lease."""
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
        """Renew a held lease."""
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
        """Record the job's completion."""
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
        """Give a held lease back."""
        ...

    def list_leases(
        self, namespace: str, *, label_selector: str | None = None
    ) -> list[StoredLease]:
        """List the leases of a namespace."""
        ...


class LeaseWriter:
    """A holder's lease operations (claim, renew, complete, release) over some transport.

    Parameters and errors are :class:`~leasehold.lease.store.LeaseStore`'s
    (which is one). A subclass sends the requests: :meth:`_read` (GET one
    JobLease), :meth:`_patch` (one JSON patch), each raising the
    :mod:`leasehold.lease.errors` types, and may override :meth:`_parse`.

    Args:
        clock: wall clock for the times recorded for people (``renewTime``
            etc.); never used to judge expiry.
    """

    def __init__(self, *, clock: Callable[[], datetime] = utcnow) -> None:
        self._clock = clock

    # -- the transport (a subclass's) -----------------------------------------

    def _read(
        self, namespace: str, name: str, request_timeout: float | None = None
    ) -> dict[str, Any]:
        """GET the JobLease's body."""
        raise NotImplementedError

    def _patch(
        self,
        action: str,
        namespace: str,
        name: str,
        ops: list[dict[str, Any]],
        request_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one JSON patch; a refusal raises :class:`WriteRefusedError`."""
        raise NotImplementedError

    def _parse(self, body: dict[str, Any]) -> StoredLease:
        """Turn a body the API server returned into a :class:`StoredLease`."""
        return stored_from_body(body)

    def get(
        self, namespace: str, name: str, *, request_timeout: float | None = None
    ) -> StoredLease:
        """Read a lease; :class:`~leasehold.lease.errors.InvalidLeaseError` if it does not parse."""
        return self._parse(self._read(namespace, name, request_timeout))

    # -- the protocol -------------------------------------------------------

    def claim(
        self,
        namespace: str,
        name: str,
        claimant: str,
        *,
        observed: StoredLease | None = None,
        holder_uid: str | None = None,
        token: int | None = None,
        job_uid: str | None = None,
    ) -> Result:
        """Claim an unheld lease: holder := ``claimant``, token := token + 1.

        ``holder_uid`` is the claimant's pod UID, bound in the same write
        (``None``: a claimant that is no pod). The operator claims for a pod
        it created under ``token`` (the token this claim must take) for the
        job incarnation ``job_uid``: a lease at another token, or serving
        another incarnation, is ``LOST_RACE`` (:func:`protocol.claim`), with
        no retry on it, and the write tests ``spec.jobUID``.

        With ``observed`` (the lease as the caller last saw it, from a list, a watch
        or a read) the rules judge it and, if they allow the claim, the patch is
        sent at once: one PATCH, no GET. Without it, or when the server or the
        rules refuse on ``observed`` (which may be stale), it reads, judges and
        writes, re-reading after each refused write. A rejection therefore always
        comes from a fresh read.

        Returns:
            :class:`Accepted` (``.token`` is the new token) or :class:`Rejected`
            with ``LOST_RACE``, ``COMPLETED`` or ``EXHAUSTED``.

        Raises:
            WriteRefusedError: the server refused the write twice on a lease nobody
                changed in between: not a race (e.g. a holder name the schema refuses).
        """
        holder = HolderIdentity(claimant)
        pinned: dict[str, Any] = {
            "holder_uid": holder_uid,
            "token": FencingToken(token) if token is not None else None,
            "job_uid": job_uid,
        }
        if observed is not None:
            decision = protocol.claim(observed.record, holder, self._clock(), **pinned)
            if isinstance(decision, protocol.Allowed):
                ops = claim_ops(observed.record.fencing_token, decision.record, job_uid)
                try:
                    return Accepted(self._parse(self._patch("claim", namespace, name, ops)))
                except WriteRefusedError as exc:
                    log.debug(
                        "claim %s/%s by %s on observed token %d: HTTP %s, reading",
                        namespace,
                        name,
                        claimant,
                        observed.record.fencing_token,
                        exc.status,
                    )
            # Denied on `observed`, or the server refused: `observed` may be
            # stale either way, so judge again on a fresh read.
        refused: WriteRefusedError | None = None  # the last 422 ...
        refused_version = ""  # ... on this resourceVersion
        for _ in range(MAX_CONFLICT_RETRIES):
            lease = self.get(namespace, name)
            decision = protocol.claim(lease.record, holder, self._clock(), **pinned)
            if isinstance(decision, protocol.Denied):
                return Rejected(decision.rejection, lease)
            if refused is not None and refused_version == lease.resource_version:
                # Refused on a lease nobody changed since: not a race but a
                # write the server will never take (e.g. an invalid holder name).
                raise refused
            ops = claim_ops(lease.record.fencing_token, decision.record, job_uid)
            try:
                body = self._patch("claim", namespace, name, ops)
            except WriteRefusedError as exc:
                refused = exc if exc.status == 422 else None
                refused_version = lease.resource_version
                log.debug(
                    "claim %s/%s by %s: HTTP %s, re-reading", namespace, name, claimant, exc.status
                )
                continue
            return Accepted(self._parse(body))
        raise TransientStoreError(
            f"claim {namespace}/{name}: still conflicting after {MAX_CONFLICT_RETRIES} tries"
        )

    def _guarded(
        self,
        namespace: str,
        name: str,
        action: str,
        holder: HolderIdentity,
        token: FencingToken,
        ops: list[dict[str, Any]],
        decide: Callable[[LeaseRecord], protocol.Decision],
        request_timeout: float | None = None,
        *,
        holder_uid: str | None = None,
        ends_hold: bool = False,
        binds: bool = False,
    ) -> Result:
        """Write ``ops`` under holder + token tests; after a refusal, re-read and ``decide``.

        With ``holder_uid``, the write also tests that the lease is bound to
        that pod (a pod's renew, complete, release: an unbound lease fails the
        test and ``decide`` says ``NOT_BOUND``), or, with ``binds`` (the
        operator's :meth:`bind` only), binds it (the CRD refuses a change). A
        write that ends the hold always clears ``spec.holderUID``.
        """
        uid_ops: list[dict[str, Any]] = []
        if holder_uid is not None:
            uid_ops.append(bind_op(holder_uid) if binds else uid_test(holder_uid))
        if ends_hold:
            uid_ops.append(UNBIND)
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                body = self._patch(
                    action,
                    namespace,
                    name,
                    holder_tests(holder, token) + uid_ops + ops,
                    request_timeout,
                )
            except WriteRefusedError as exc:
                lease = self.get(namespace, name, request_timeout=request_timeout)
                decision = decide(lease.record)
                if isinstance(decision, protocol.Denied):
                    return Rejected(decision.rejection, lease)
                # The protocol allows it on a fresh read: the failure was a
                # race with a write that is gone now. Try again.
                log.debug(
                    "%s %s/%s: HTTP %s but allowed on re-read; retrying",
                    action,
                    namespace,
                    name,
                    exc.status,
                )
                continue
            return Accepted(self._parse(body))
        raise TransientStoreError(
            f"{action} {namespace}/{name}: still conflicting after {MAX_CONFLICT_RETRIES} tries"
        )

    def renew(
        self,
        namespace: str,
        name: str,
        holder: str,
        token: int,
        *,
        request_timeout: float | None = None,
        holder_uid: str | None = None,
    ) -> Result:
        """Renew: the holder is alive. Exactly one write, no read before it.

        A holder passes as ``request_timeout`` the time left before its own deadline.
        A holder that is a pod passes its ``holder_uid``: the lease must be
        bound to it already (a pull claim binds it; in push mode the operator
        binds it to the pod it created). A lease bound to another pod of the
        same name is refused (``NOT_HOLDER``), an unbound one ``NOT_BOUND``
        (not yet bound: retry within the window, it is no loss). A renewal
        never binds.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_HOLDER``,
            ``NOT_BOUND``, ``STALE_TOKEN`` or ``COMPLETED``.
        """
        h, t = HolderIdentity(holder), FencingToken(token)
        now = self._clock()
        ops: list[dict[str, Any]] = [
            {"op": "add", "path": "/spec/renewTime", "value": format_time(now)}
        ]
        return self._guarded(
            namespace,
            name,
            "renew",
            h,
            t,
            ops,
            lambda r: protocol.renew(r, h, t, now, holder_uid=holder_uid),
            request_timeout,
            holder_uid=holder_uid,
        )

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
        holder_uid: str | None = None,
    ) -> Result:
        """Complete: record ``{token, outcome}`` once, with ``message`` and ``exit_code``.

        ``holder_uid`` as for :meth:`renew`: refused when bound to another pod
        (``NOT_HOLDER``) or unbound (``NOT_BOUND``).

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_HOLDER``,
            ``STALE_TOKEN`` or ``COMPLETED``.
        """
        h, t = HolderIdentity(holder), FencingToken(token)
        now = self._clock()

        def decide(record: LeaseRecord) -> protocol.Decision:
            return protocol.complete(
                record,
                h,
                t,
                outcome,
                now,
                message=message,
                exit_code=exit_code,
                holder_uid=holder_uid,
            )

        completion = Completion(
            fencing_token=t,
            holder_identity=h,
            outcome=outcome,
            complete_time=now,
            message=message,
            exit_code=exit_code,
        )
        ops: list[dict[str, Any]] = [
            {"op": "add", "path": "/spec/completion", "value": completion_body(completion)},
            {"op": "remove", "path": "/spec/holderIdentity"},
        ]
        return self._guarded(
            namespace,
            name,
            "complete",
            h,
            t,
            ops,
            decide,
            request_timeout,
            holder_uid=holder_uid,
            ends_hold=True,
        )

    def release(
        self,
        namespace: str,
        name: str,
        holder: str,
        token: int,
        *,
        request_timeout: float | None = None,
        holder_uid: str | None = None,
    ) -> Result:
        """Release: the holder gives the lease up; the token is kept.

        ``holder_uid`` as for :meth:`renew`: refused when bound to another pod
        (``NOT_HOLDER``) or unbound (``NOT_BOUND``).

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_HOLDER``,
            ``STALE_TOKEN`` or ``COMPLETED``.
        """
        h, t = HolderIdentity(holder), FencingToken(token)
        ops = [{"op": "remove", "path": "/spec/holderIdentity"}]
        return self._guarded(
            namespace,
            name,
            "release",
            h,
            t,
            ops,
            lambda r: protocol.release(r, h, t, holder_uid=holder_uid),
            request_timeout,
            holder_uid=holder_uid,
            ends_hold=True,
        )
