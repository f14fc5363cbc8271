"""The lease store: each lease operation as ONE atomic write to the API server.

Why this module exists: it is the only code that writes JobLeases. Each
operation is decided by :mod:`leasehold.lease.protocol` and sent as one JSON
patch, which the API server applies inside its own compare-and-swap: ``test``
ops on holder and token (renew, complete, release: no read before the write),
on the token a claim was judged on (:func:`_claim_ops` says why that is
enough), or a ``resourceVersion`` precondition (the operator's reclaim and
stop). The CRD's CEL rules judge the same write, so a client that skips this
module cannot break the invariants either. A refused write (409/422) costs one
read, and the rules say why; if they allow it on the fresh read, the race is
gone and the write is tried again. Where each rule is enforced:
``docs/architecture.md``.

Every API call runs inside :func:`leasehold.lease.errors.api_errors`, so no
method lets a client or transport error escape. Results are :class:`Accepted`
or :class:`Rejected` (the rules' own verdicts are ``Allowed``/``Denied``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, cast

from kubernetes import client
from pydantic import ValidationError

from leasehold import names
from leasehold.lease import models, protocol
from leasehold.lease.errors import (
    InvalidLeaseError,
    LeaseNotFoundError,
    TransientStoreError,
    WriteRefusedError,
    api_errors,
)
from leasehold.lease.protocol import (
    Completion,
    FencingToken,
    HolderIdentity,
    LeaseRecord,
    Outcome,
    Rejection,
)

log = logging.getLogger(__name__)

PLURAL: Final = names.PLURAL_JOB_LEASES
MAX_CONFLICT_RETRIES: Final = 16
"""How often an operation re-reads after a conflict before giving up."""

_JSON_PATCH: Final = "application/json-patch+json"


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
# Conversion


def _parse_time(value: Any) -> datetime | None:
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


def to_stored(body: dict[str, Any]) -> StoredLease:
    """Parse a JobLease body as returned by the API server.

    Raises:
        InvalidLeaseError: the body does not match the JobLease model.
    """
    meta = body.get("metadata", {})
    try:
        lease = models.JobLease.model_validate(body)
    except ValidationError as exc:
        raise InvalidLeaseError(
            f"JobLease {meta.get('namespace')}/{meta.get('name')} is invalid: {exc}"
        ) from exc
    spec = lease.spec
    record = LeaseRecord(
        job_name=spec.job_name,
        holder_identity=HolderIdentity(spec.holder_identity) if spec.holder_identity else None,
        fencing_token=FencingToken(spec.fencing_token),
        lease_duration_seconds=spec.lease_duration_seconds,
        acquire_time=spec.acquire_time,
        renew_time=spec.renew_time,
        completion=_completion(spec.completion),
        max_fencing_token=(
            FencingToken(spec.max_fencing_token) if spec.max_fencing_token is not None else None
        ),
        holder_uid=spec.holder_uid,
        job_uid=spec.job_uid,
        base_fencing_token=FencingToken(spec.base_fencing_token),
        failures=spec.failures,
        last_failure=_completion(spec.last_failure),
        suspended=spec.suspended,
        suspensions=spec.suspensions,
        uncounted_attempts=spec.uncounted_attempts,
        last_uncounted_token=(
            FencingToken(spec.last_uncounted_token)
            if spec.last_uncounted_token is not None
            else None
        ),
    )
    return StoredLease(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        record=record,
        resource_version=str(meta.get("resourceVersion", "")),
        generation=int(meta.get("generation", 0)),
        body=body,
    )


def _completion(c: models.CompletionRecord | None) -> Completion | None:
    if c is None:
        return None
    return Completion(
        fencing_token=FencingToken(c.fencing_token),
        holder_identity=HolderIdentity(c.holder_identity),
        outcome=Outcome(c.outcome),
        complete_time=c.complete_time or datetime.min.replace(tzinfo=UTC),
        message=c.message or "",
        exit_code=c.exit_code,
    )


def _completion_body(completion: Completion) -> dict[str, Any]:
    body: dict[str, Any] = {
        "fencingToken": completion.fencing_token,
        "holderIdentity": completion.holder_identity,
        "outcome": str(completion.outcome),
        "completeTime": format_time(completion.complete_time),
    }
    if completion.message:
        body["message"] = completion.message[: models.MAX_MESSAGE_LENGTH]
    if completion.exit_code is not None:
        body["exitCode"] = completion.exit_code
    return body


def _excuse_ops(before: LeaseRecord, after: LeaseRecord) -> list[dict[str, Any]]:
    """JSON-patch ops writing an excuse (:func:`protocol.excuse`), if ``after`` has one."""
    if after.uncounted_attempts == before.uncounted_attempts:
        return []
    return [
        {"op": "add", "path": "/spec/uncountedAttempts", "value": after.uncounted_attempts},
        {"op": "add", "path": "/spec/lastUncountedToken", "value": after.last_uncounted_token},
        {"op": "add", "path": "/spec/maxFencingToken", "value": after.max_fencing_token},
    ]


def _timeout(request_timeout: float | None) -> dict[str, Any]:
    """The client's ``_request_timeout`` keyword, when a timeout is given."""
    return {} if request_timeout is None else {"_request_timeout": request_timeout}


def _holder_tests(holder: HolderIdentity, token: FencingToken) -> list[dict[str, Any]]:
    return [
        {"op": "test", "path": "/spec/holderIdentity", "value": holder},
        {"op": "test", "path": "/spec/fencingToken", "value": token},
    ]


_UNBIND: Final[dict[str, Any]] = {"op": "add", "path": "/spec/holderUID", "value": None}
"""Remove ``spec.holderUID`` whether or not it is there: the API server prunes a
null from a field that is not nullable, where a JSON patch ``remove`` of an
absent path would fail."""


def _bind(holder_uid: str) -> dict[str, Any]:
    """Bind the lease to the holder's pod, or confirm it: the CRD refuses a change."""
    return {"op": "add", "path": "/spec/holderUID", "value": holder_uid}


def _uid_test(holder_uid: str) -> dict[str, Any]:
    return {"op": "test", "path": "/spec/holderUID", "value": holder_uid}


def _claim_ops(
    judged_token: FencingToken, new: LeaseRecord, holder_uid: str | None = None
) -> list[dict[str, Any]]:
    """The JSON patch of a claim judged on a lease at ``judged_token``.

    It binds the claimant's pod (``holder_uid``) in the same write, if any.

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
    return [
        {"op": "test", "path": "/spec/fencingToken", "value": judged_token},
        {"op": "add", "path": "/spec/holderIdentity", "value": new.holder_identity},
        {"op": "replace", "path": "/spec/fencingToken", "value": new.fencing_token},
        {"op": "add", "path": "/spec/acquireTime", "value": acquired},
        {"op": "add", "path": "/spec/renewTime", "value": acquired},
        _bind(holder_uid) if holder_uid else _UNBIND,
    ]


@dataclass(frozen=True)
class WorkItem:
    """What a pull-mode claimer gets with a lease, copied from its job.

    Attributes:
        params: the job's ``spec.params``.
        priority: the job's ``spec.priority``.
        job_created: the job's ``metadata.creationTimestamp`` (ties of priority).
    """

    params: dict[str, Any] | None = None
    priority: int = 0
    job_created: datetime | None = None

    def fields(self) -> dict[str, Any]:
        """The JobLease spec fields, by their Python names."""
        return {
            "params": self.params,
            "priority": self.priority,
            "job_creation_timestamp": self.job_created,
        }


# --------------------------------------------------------------------------
# The store


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LeaseStore:
    """Lease operations on JobLease objects, each as one atomic write.

    The operations share their parameters and errors, so they are said once
    here. ``namespace`` and ``name`` name the JobLease; ``holder`` and
    ``token`` are the caller's identity and fencing token; ``request_timeout``
    bounds each request in seconds (``None``: ``request_timeout_seconds``).
    Every operation may raise :class:`~leasehold.lease.errors.LeaseNotFoundError`
    (no such lease), :class:`~leasehold.lease.errors.TransientStoreError` (retry
    later; also after :data:`MAX_CONFLICT_RETRIES` races) or
    :class:`~leasehold.lease.errors.StoreError` (any other refusal, e.g. RBAC).
    Thread-safe as far as the ``ApiClient`` is.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        clock: wall clock for the times recorded for people (``renewTime``
            etc.); never used to judge expiry.
        field_manager: the ``fieldManager`` sent with every write.
        request_timeout_seconds: bound on each request without its own
            ``request_timeout`` (``None``: wait forever); a half-open connection
            then fails the request instead of hanging the caller's thread.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        clock: Callable[[], datetime] = _utcnow,
        field_manager: str = "leasehold",
        request_timeout_seconds: float | None = None,
    ) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._clock = clock
        self._field_manager = field_manager
        self._default_timeout = request_timeout_seconds

    def _timeout(self, request_timeout: float | None) -> dict[str, Any]:
        """The client's ``_request_timeout`` keyword for one request."""
        return _timeout(request_timeout if request_timeout is not None else self._default_timeout)

    # -- plain reads and writes ---------------------------------------------

    def get(
        self, namespace: str, name: str, *, request_timeout: float | None = None
    ) -> StoredLease:
        """Read a lease; :class:`~leasehold.lease.errors.InvalidLeaseError` if it does not parse."""
        with api_errors("get", namespace, name):
            body = self._api.get_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                PLURAL,
                name,
                **self._timeout(request_timeout),
            )
        return to_stored(cast("dict[str, Any]", body))

    def list_leases(
        self, namespace: str, *, label_selector: str | None = None
    ) -> list[StoredLease]:
        """Read all leases of a namespace, optionally matching ``label_selector``."""
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        with api_errors("list", namespace):
            body = self._api.list_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, PLURAL, **kwargs
            )
        return [to_stored(item) for item in cast("dict[str, Any]", body).get("items", [])]

    def create(
        self,
        namespace: str,
        name: str,
        *,
        job_name: str,
        lease_duration_seconds: int,
        max_fencing_token: int | None = None,
        initial_fencing_token: int = 0,
        owner_references: list[dict[str, Any]] | None = None,
        labels: dict[str, str] | None = None,
        startup_deadline_seconds: int | None = None,
        job_uid: str | None = None,
        mode: models.LeaseMode | None = None,
        finalizers: list[str] | None = None,
        suspended: bool = False,
        work: WorkItem | None = None,
    ) -> StoredLease:
        """Create an unheld lease of the LeasedJob ``job_name``.

        ``max_fencing_token`` is the attempt limit (no claim past it);
        ``initial_fencing_token`` is above 0 only when a lost lease is recreated, so
        tokens never go back (it is the incarnation's base token too). The
        operator sets no ``owner_references``: the lease is the name's fencing
        domain and outlives the job; ``finalizers`` (the operator's) keep it
        when someone deletes it. ``job_uid`` names the incarnation it serves,
        ``mode`` who claims it;
        ``startup_deadline_seconds`` bounds an attempt's start (push mode; ``None`` in
        pull mode); ``suspended`` creates it suspended (its job is: nothing may claim);
        ``work`` is the job's params, priority and creation time.

        Raises:
            WriteRefusedError: it exists already (status 409), or the schema refused it.
        """
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if owner_references:
            metadata["ownerReferences"] = owner_references
        if labels:
            metadata["labels"] = labels
        if finalizers:
            metadata["finalizers"] = finalizers
        lease = models.JobLease(
            metadata=metadata,
            spec=models.JobLeaseSpec(
                job_name=job_name,
                job_uid=job_uid,
                mode=mode,
                lease_duration_seconds=lease_duration_seconds,
                max_fencing_token=max_fencing_token,
                fencing_token=initial_fencing_token,
                startup_deadline_seconds=startup_deadline_seconds,
                base_fencing_token=initial_fencing_token,
                suspended=suspended,
                **(work or WorkItem()).fields(),
            ),
        )
        with api_errors("create", namespace, name):
            body = self._api.create_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                PLURAL,
                lease.to_api(),
                field_manager=self._field_manager,
            )
        return to_stored(cast("dict[str, Any]", body))

    def _patch(
        self,
        action: str,
        namespace: str,
        name: str,
        ops: list[dict[str, Any]],
        request_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one JSON patch; a refusal raises :class:`WriteRefusedError`."""
        with api_errors(action, namespace, name):
            result = self._api.patch_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                PLURAL,
                name,
                ops,
                field_manager=self._field_manager,
                _content_type=_JSON_PATCH,
                **self._timeout(request_timeout),
            )
        return cast("dict[str, Any]", result)

    # -- the protocol -------------------------------------------------------

    def claim(
        self,
        namespace: str,
        name: str,
        claimant: str,
        *,
        observed: StoredLease | None = None,
        holder_uid: str | None = None,
    ) -> Result:
        """Claim an unheld lease: holder := ``claimant``, token := token + 1.

        ``holder_uid`` is the claimant's pod UID, bound in the same write
        (``None``: a claimant that is no pod, or the operator claiming for a pod
        it has yet to create; it binds with :meth:`bind` once the pod exists).

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
        if observed is not None:
            decision = protocol.claim(observed.record, holder, self._clock())
            if isinstance(decision, protocol.Allowed):
                ops = _claim_ops(observed.record.fencing_token, decision.record, holder_uid)
                try:
                    return Accepted(to_stored(self._patch("claim", namespace, name, ops)))
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
            decision = protocol.claim(lease.record, holder, self._clock())
            if isinstance(decision, protocol.Denied):
                return Rejected(decision.rejection, lease)
            if refused is not None and refused_version == lease.resource_version:
                # Refused on a lease nobody changed since: not a race but a
                # write the server will never take (e.g. an invalid holder name).
                raise refused
            ops = _claim_ops(lease.record.fencing_token, decision.record, holder_uid)
            try:
                body = self._patch("claim", namespace, name, ops)
            except WriteRefusedError as exc:
                refused = exc if exc.status == 422 else None
                refused_version = lease.resource_version
                log.debug(
                    "claim %s/%s by %s: HTTP %s, re-reading", namespace, name, claimant, exc.status
                )
                continue
            return Accepted(to_stored(body))
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
            uid_ops.append(_bind(holder_uid) if binds else _uid_test(holder_uid))
        if ends_hold:
            uid_ops.append(_UNBIND)
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                body = self._patch(
                    action,
                    namespace,
                    name,
                    _holder_tests(holder, token) + uid_ops + ops,
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
            return Accepted(to_stored(body))
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
            {"op": "add", "path": "/spec/completion", "value": _completion_body(completion)},
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

    def reclaim(self, judged: StoredLease) -> Result:
        """Reclaim a lease the operator judged expired: unheld, token kept.

        The write carries ``judged.resource_version``: if the lease changed since (a
        renewal), the server answers 409 and nothing is reclaimed.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_EXPIRED`` (changed
            since, or unheld) or ``COMPLETED``.
        """
        decision = protocol.reclaim(judged.record, expired=True)
        if isinstance(decision, protocol.Denied):
            return Rejected(decision.rejection, judged)
        assert judged.record.holder_identity is not None
        ops = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            *_holder_tests(judged.record.holder_identity, judged.record.fencing_token),
            {"op": "remove", "path": "/spec/holderIdentity"},
            _UNBIND,
        ]
        return self._conditional(judged, ops, "reclaim")

    def stop(self, judged: StoredLease) -> Result:
        """Take a lease back for good: unheld, and no claim past its current token.

        The operator's write when a job ends without a completion (deadline passed,
        attempts used up); it lowers ``spec.maxFencingToken`` to the current token
        (the API server enforces the cap). Conditioned on ``judged.resource_version``.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``COMPLETED`` (a worker
            completed first: that stands) or ``NOT_EXPIRED`` (it changed since:
            re-read and decide again).
        """
        if judged.record.completion is not None:
            return Rejected(Rejection.COMPLETED, judged)
        ops: list[dict[str, Any]] = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            {"op": "add", "path": "/spec/maxFencingToken", "value": judged.record.fencing_token},
        ]
        if judged.record.holder_identity is not None:
            ops += [{"op": "remove", "path": "/spec/holderIdentity"}, _UNBIND]
        return self._conditional(judged, ops, "stop")

    def close(self, judged: StoredLease) -> Result:
        """No claim past the current token, the holder kept: its attempt may still finish.

        A LeasedCronJob's ``Forbid`` closes an earlier run's lease before a new
        run may start (docs/architecture.md, "LeasedCronJob"): the holder can
        renew, complete or release under its token, but once the lease is
        unheld it can never be held again, so "unheld" is final. Conditioned
        on ``judged.resource_version``.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_EXPIRED`` (it
            changed since: re-read and decide again).
        """
        ops: list[dict[str, Any]] = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            {"op": "add", "path": "/spec/maxFencingToken", "value": judged.record.fencing_token},
        ]
        return self._conditional(judged, ops, "close")

    def reopen(self, judged: StoredLease, *, counted: bool = True) -> Result:
        """Reopen a lease whose worker failed, so the job can be retried (operator only).

        One write moves ``spec.completion`` to ``spec.lastFailure`` and adds one
        to ``spec.failures``; the lease stays unheld at its token (the CRD's
        rules allow exactly this). A failure not ``counted`` (a rule ignores
        it) is excused in the same write instead (:meth:`excuse`'s fields).
        Conditioned on ``judged.resource_version``.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``COMPLETED`` (the
            completion is not Failed) or ``NOT_EXPIRED`` (nothing to reopen, or
            it changed since: re-read and decide again).
        """
        decision = protocol.reopen(judged.record, counted=counted)
        if isinstance(decision, protocol.Denied):
            return Rejected(decision.rejection, judged)
        failure = judged.record.completion
        assert failure is not None
        ops: list[dict[str, Any]] = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            {"op": "remove", "path": "/spec/completion"},
            {"op": "add", "path": "/spec/failures", "value": decision.record.failures},
            {"op": "add", "path": "/spec/lastFailure", "value": _completion_body(failure)},
            *_excuse_ops(judged.record, decision.record),
        ]
        return self._conditional(judged, ops, "reopen")

    def suspend(self, judged: StoredLease) -> Result:
        """Suspend a lease (its job's ``spec.suspend``): unheld, no claim until resumed.

        A held lease is released in the same write, which counts one
        suspension and raises the cap by one (the ended attempt uses no
        budget; the CRD allows exactly this); the holder's late writes carry a
        token that is no longer held. Conditioned on ``judged.resource_version``.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``COMPLETED`` (a worker
            completed first: that stands) or ``NOT_EXPIRED`` (it changed since:
            re-read and decide again).
        """
        decision = protocol.suspend(judged.record)
        if isinstance(decision, protocol.Denied):
            return Rejected(decision.rejection, judged)
        new = decision.record
        ops: list[dict[str, Any]] = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            {"op": "add", "path": "/spec/suspended", "value": True},
        ]
        if judged.record.holder_identity is not None:
            ops += [
                {"op": "remove", "path": "/spec/holderIdentity"},
                _UNBIND,
                {"op": "add", "path": "/spec/suspensions", "value": new.suspensions},
            ]
            if new.max_fencing_token is not None:
                ops.append(
                    {"op": "add", "path": "/spec/maxFencingToken", "value": new.max_fencing_token}
                )
        return self._conditional(judged, ops, "suspend")

    def resume(self, judged: StoredLease) -> Result:
        """Resume a suspended lease: claimable again (the next claim takes a higher token).

        Conditioned on ``judged.resource_version``.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_EXPIRED`` (it
            changed since: re-read and decide again) or ``COMPLETED``.
        """
        ops: list[dict[str, Any]] = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            {"op": "add", "path": "/spec/suspended", "value": False},
        ]
        return self._conditional(judged, ops, "resume")

    def excuse(self, judged: StoredLease) -> Result:
        """Let the ended attempt under the lease's token draw on no budget (operator only).

        For an attempt ended by a disruption (an eviction) or by a failure the
        job's rules ignore: one write adds one to ``spec.uncountedAttempts`` and
        to ``spec.maxFencingToken`` and records the token as
        ``spec.lastUncountedToken`` (once per token; the CRD's rules allow
        exactly this). Conditioned on ``judged.resource_version``.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``COMPLETED`` or
            ``NOT_EXPIRED`` (held, already excused, or changed since: re-read
            and decide again).
        """
        decision = protocol.excuse(judged.record)
        if isinstance(decision, protocol.Denied):
            return Rejected(decision.rejection, judged)
        ops: list[dict[str, Any]] = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            *_excuse_ops(judged.record, decision.record),
        ]
        return self._conditional(judged, ops, "excuse")

    def _conditional(self, judged: StoredLease, ops: list[dict[str, Any]], action: str) -> Result:
        """Write ``ops`` only if the lease is still at ``judged``'s version."""
        try:
            body = self._patch(action, judged.namespace, judged.name, ops)
        except WriteRefusedError:
            current = self.get(judged.namespace, judged.name)
            rejection = (
                Rejection.COMPLETED
                if current.record.completion is not None
                else Rejection.NOT_EXPIRED
            )
            return Rejected(rejection, current)
        return Accepted(to_stored(body))

    # -- the fencing domain (the operator's) ---------------------------------

    def rearm(
        self,
        judged: StoredLease,
        *,
        job_uid: str,
        mode: models.LeaseMode,
        lease_duration_seconds: int,
        max_attempts: int,
        startup_deadline_seconds: int | None = None,
        suspended: bool = False,
        work: WorkItem | None = None,
    ) -> Result:
        """Hand the lease to a new incarnation of its job, at the same token.

        The lease is the fencing domain of its namespace/name: a LeasedJob deleted
        and created again under the same name gets the same lease, with the old
        incarnation's holder removed, its completion and failures dropped, ``baseFencingToken``
        set to the current token and the cap to ``token + max_attempts``. Its
        first claim takes the next token, so tokens (and with them pod names and
        idempotency keys) never repeat and never go down. Its timing
        (``lease_duration_seconds``, ``startup_deadline_seconds``: ``None`` in
        pull mode), ``suspended`` and ``work`` (params, priority, creation time)
        are the new incarnation's (its suspensions start at 0). The CRD allows these
        changes only together with a new ``spec.jobUID``. Any
        ``ownerReferences`` (a lease made before leases outlived their jobs) are
        removed. Conditioned on ``judged.resource_version``.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_EXPIRED`` (the
            lease changed since it was judged: re-read and decide again).
        """
        token = judged.record.fencing_token
        ops: list[dict[str, Any]] = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            {"op": "add", "path": "/spec/jobUID", "value": job_uid},
            {"op": "add", "path": "/spec/mode", "value": str(mode)},
            {"op": "add", "path": "/spec/baseFencingToken", "value": token},
            {"op": "add", "path": "/spec/maxFencingToken", "value": token + max_attempts},
            {"op": "add", "path": "/spec/leaseDurationSeconds", "value": lease_duration_seconds},
            {
                "op": "add",
                "path": "/spec/startupDeadlineSeconds",
                "value": startup_deadline_seconds,
            },
            {"op": "add", "path": "/spec/holderIdentity", "value": None},
            _UNBIND,
            {"op": "add", "path": "/spec/completion", "value": None},
            {"op": "add", "path": "/spec/failures", "value": 0},
            {"op": "add", "path": "/spec/lastFailure", "value": None},
            {"op": "add", "path": "/spec/suspended", "value": suspended},
            {"op": "add", "path": "/spec/suspensions", "value": 0},
            {"op": "add", "path": "/spec/uncountedAttempts", "value": 0},
            {"op": "add", "path": "/spec/lastUncountedToken", "value": None},
        ]
        api_work = models.JobLeaseSpec(job_name="x", **(work or WorkItem()).fields()).to_api()
        for key in ("params", "priority", "jobCreationTimestamp"):
            ops.append({"op": "add", "path": f"/spec/{key}", "value": api_work.get(key)})
        if judged.body.get("metadata", {}).get("ownerReferences"):
            # A lease made before leases outlived their jobs: let it outlive them.
            ops.append({"op": "remove", "path": "/metadata/ownerReferences"})
        result = self._conditional(judged, ops, "rearm")
        if isinstance(result, Rejected) and result.rejection is Rejection.COMPLETED:
            return Rejected(Rejection.NOT_EXPIRED, result.lease)
        return result

    def bind(self, namespace: str, name: str, holder: str, token: int, holder_uid: str) -> Result:
        """Bind a held lease to its holder's pod (the operator's, after creating it).

        One write, under holder + token tests; the CRD refuses it when the lease
        is bound to another pod already. Only the operator binds a push lease:
        a pod's own writes never do (:func:`leasehold.lease.protocol.check_holder`).

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_HOLDER``,
            ``STALE_TOKEN`` or ``COMPLETED``.
        """
        h, t = HolderIdentity(holder), FencingToken(token)
        return self._guarded(
            namespace,
            name,
            "bind",
            h,
            t,
            [],
            lambda r: protocol.bind(r, h, t, holder_uid),
            holder_uid=holder_uid,
            binds=True,
        )

    def drop_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        """Remove ``finalizer`` from a lease, if it is there.

        Returns:
            Whether it was removed (``False``: not there, or the lease is gone).
        """
        try:
            lease = self.get(namespace, name)
        except LeaseNotFoundError:
            return False
        finalizers = list(lease.body.get("metadata", {}).get("finalizers") or [])
        if finalizer not in finalizers:
            return False
        at = finalizers.index(finalizer)
        ops = [
            {"op": "test", "path": f"/metadata/finalizers/{at}", "value": finalizer},
            {"op": "remove", "path": f"/metadata/finalizers/{at}"},
        ]
        try:
            self._patch("drop finalizer", namespace, name, ops)
        except LeaseNotFoundError:
            return False
        return True

    def delete(self, namespace: str, name: str) -> None:
        """Delete a lease (it stays, Terminating, while a finalizer is on it).

        Only for a lease whose fencing domain lives on elsewhere: a
        LeasedCronJob's run removed from its history (the cron job's
        reservation and its newest run's lease keep the domain).

        Raises:
            TransientStoreError: the API server failed; try again.
        """
        try:
            with api_errors("delete", namespace, name):
                self._api.delete_namespaced_custom_object(
                    names.GROUP, names.VERSION, namespace, PLURAL, name
                )
        except LeaseNotFoundError:
            return
