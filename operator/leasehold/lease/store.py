"""The Kubernetes-backed lease store: each operation is ONE atomic write.

Why this module exists: it is the only place that talks to the API server
about JobLeases. Every operation is decided by :mod:`leasehold.lease.protocol` and
written as a single JSON patch that the API server applies atomically
(RFC 6902 ``test`` ops, evaluated inside the server's compare-and-swap loop on
``resourceVersion``):

* **renew / complete / release** send ``test`` ops on ``holderIdentity`` and
  ``fencingToken`` and then the change: no read before the write. If a test
  fails (HTTP 422), the lease is read and the protocol says why (not the
  holder, stale token, already completed).
* **claim** sends a ``test`` op on the fencing token it judged on, then sets holder,
  token + 1 and times, with no ``resourceVersion`` precondition: the CRD's
  CEL rules refuse a claim of a held, completed or exhausted lease, so the
  server judges the rest, and unrelated writes (the operator's status)
  cause no conflict. A caller that already knows the lease (from a list, a
  watch or a read) passes it as ``observed`` and the claim is one write;
  otherwise it reads first. On a refusal (409/422) it re-reads and judges
  the *semantic* condition again (is it still unheld?).
* **reclaim** (the operator's) carries the resourceVersion it judged expired;
  a renewal that landed meanwhile makes it fail with 409.

The API server checks the invariants too (CEL transition rules in the CRD),
so a client that skips this module still cannot break them.

Every API call runs inside :func:`leasehold.lease.errors.api_errors`, the one
edge where client and transport errors become the types of
:mod:`leasehold.lease.errors`: no method lets an ``ApiException`` or a urllib3
error escape. Results: :class:`Accepted` or :class:`Rejected` (the pure
rules' own verdicts are ``Allowed``/``Denied``).
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
        record: the protocol's view of it.
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


@dataclass(frozen=True)
class Accepted:
    """The write landed.

    Attributes:
        lease: the lease after the write (for renew/complete/release without
            a read, ``record`` is the server's answer to the patch).
    """

    lease: StoredLease

    @property
    def token(self) -> FencingToken:
        """The lease's fencing token after the write (for a claim: yours)."""
        return self.lease.record.fencing_token


@dataclass(frozen=True)
class Rejected:
    """The write was refused by the protocol; nothing changed.

    Attributes:
        rejection: why (``LOST_RACE``, ``NOT_HOLDER``, ``STALE_TOKEN``,
            ``COMPLETED``, ``NOT_EXPIRED``).
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
    """Format a time as Kubernetes MicroTime (RFC 3339, microseconds, ``Z``).

    Args:
        value: an aware datetime (naive ones are taken as UTC).

    Returns:
        e.g. ``"2026-11-30T06:18:29.123456Z"``.
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def to_stored(body: dict[str, Any]) -> StoredLease:
    """Parse a JobLease body into a :class:`StoredLease`.

    Args:
        body: the object as returned by the API server.

    Returns:
        The parsed lease.

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
    completion = None
    if spec.completion is not None:
        c = spec.completion
        completion = Completion(
            fencing_token=FencingToken(c.fencing_token),
            holder_identity=HolderIdentity(c.holder_identity),
            outcome=Outcome(c.outcome),
            complete_time=c.complete_time or datetime.min.replace(tzinfo=UTC),
            message=c.message or "",
            exit_code=c.exit_code,
        )
    record = LeaseRecord(
        job_name=spec.job_name,
        holder_identity=HolderIdentity(spec.holder_identity) if spec.holder_identity else None,
        fencing_token=FencingToken(spec.fencing_token),
        lease_duration_seconds=spec.lease_duration_seconds,
        acquire_time=spec.acquire_time,
        renew_time=spec.renew_time,
        completion=completion,
        max_fencing_token=(
            FencingToken(spec.max_fencing_token) if spec.max_fencing_token is not None else None
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


def _timeout(request_timeout: float | None) -> dict[str, Any]:
    """The client's ``_request_timeout`` keyword, when a timeout is given."""
    return {} if request_timeout is None else {"_request_timeout": request_timeout}


def _holder_tests(holder: HolderIdentity, token: FencingToken) -> list[dict[str, Any]]:
    return [
        {"op": "test", "path": "/spec/holderIdentity", "value": holder},
        {"op": "test", "path": "/spec/fencingToken", "value": token},
    ]


def _claim_ops(judged_token: FencingToken, new: LeaseRecord) -> list[dict[str, Any]]:
    """The JSON patch of a claim judged on a lease at ``judged_token``.

    Deliberately no ``resourceVersion`` precondition. The API server applies
    a JSON patch inside its own compare-and-swap on the stored object and
    evaluates the ``test`` op and the CRD's CEL rules against the very
    version it replaces, so the write is atomic without one. What it checks
    is exactly what :func:`leasehold.lease.protocol.claim` checks:

    * the ``test`` on ``/spec/fencingToken``: the lease is still in the claim
      generation the claim was judged on; every claim bumps the token, so no
      claim has landed since;
    * CEL "a fencing token bump is a claim": the token may go up only if the
      stored lease is unheld, i.e. a held lease is never taken (``LOST_RACE``);
    * CEL "a completed lease can never be claimed or held again"
      (``COMPLETED``);
    * CEL "spec.fencingToken cannot pass spec.maxFencingToken", checked on
      the cap as stored now, which can only have gone down (``EXHAUSTED``);
    * CEL "may only stay the same or go up by exactly one": token + 1.

    The other CEL rules concern fields a claim does not write (job name,
    duration, completion) or hold for any claim (a held lease has token
    >= 1). Any other change in between (the operator's status write, a
    renewTime, labels) does not affect whether the claim is allowed; a
    resourceVersion precondition would turn each into a spurious 409 and an
    extra GET + PATCH.

    Args:
        judged_token: the fencing token of the record the claim was judged on.
        new: the record :func:`leasehold.lease.protocol.claim` produced.

    Returns:
        The ops.
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
    ]


# --------------------------------------------------------------------------
# The store


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LeaseStore:
    """Lease operations on JobLease objects, each as one atomic write.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        clock: wall clock for the times recorded for people (``renewTime``
            etc.); never used to judge expiry.
        field_manager: the ``fieldManager`` sent with every write.
        request_timeout_seconds: bound on each request when an operation is
            not given its own ``request_timeout`` (``None``: wait forever). A
            half-open connection then fails the request instead of hanging
            the caller's thread.

    Thread-safe as far as the underlying ``ApiClient`` is.
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
        """Read a lease.

        Args:
            namespace: the lease's namespace.
            name: the lease's name.
            request_timeout: give up after this many seconds (``None``: wait).

        Returns:
            The lease.

        Raises:
            LeaseNotFoundError: no such lease.
            InvalidLeaseError: the object does not parse.
            TransientStoreError: retry later.
            StoreError: any other refusal.
        """
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
        """Read all leases of a namespace.

        Args:
            namespace: where to look.
            label_selector: only leases matching it (e.g. ``pool=gpu``).

        Returns:
            The leases, in the API server's order.

        Raises:
            InvalidLeaseError: an object does not parse.
            TransientStoreError: retry later.
            StoreError: any other refusal.
        """
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
    ) -> StoredLease:
        """Create an unheld lease (token 0 unless told otherwise).

        Args:
            namespace: where.
            name: the lease's name.
            job_name: the LeasedJob it belongs to.
            lease_duration_seconds: the lease duration.
            max_fencing_token: the attempt limit (no claim past this token).
            initial_fencing_token: the token to start from; above 0 only when
                a lost lease is recreated, so tokens never go back.
            owner_references: ``metadata.ownerReferences`` (the LeasedJob).
            labels: extra labels.

        Returns:
            The created lease.

        Raises:
            StoreError: the API server refused (409 if it exists: status 409).
            TransientStoreError: retry later.
        """
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if owner_references:
            metadata["ownerReferences"] = owner_references
        if labels:
            metadata["labels"] = labels
        lease = models.JobLease(
            metadata=metadata,
            spec=models.JobLeaseSpec(
                job_name=job_name,
                lease_duration_seconds=lease_duration_seconds,
                max_fencing_token=max_fencing_token,
                fencing_token=initial_fencing_token,
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
    ) -> Result:
        """Claim an unheld lease: holder := claimant, token := token + 1.

        The write is one JSON patch: ``test`` that ``spec.fencingToken`` is
        still the token the claim was judged on, then set the holder, the
        token + 1 and the times. It carries no ``resourceVersion``
        precondition: the ``test`` and the CRD's CEL rules
        (``models._LEASE_RULES`` and ``_LEASE_CREATE_RULES``), both evaluated
        by the API server on the version it writes over, refuse every claim
        :func:`leasehold.lease.protocol.claim` refuses: a held lease (rule "a
        fencing token bump is a claim"), a completed one ("a completed lease
        can never be claimed"), a token past ``maxFencingToken`` (the cap
        rule); the rules were checked to be complete for this, see
        :func:`_claim_ops`. So unrelated writes in between (the operator's
        status, labels) cost no retry.

        Without ``observed``, reads the lease, lets the protocol decide and
        writes. With ``observed``, the first attempt skips the read: the
        protocol decides on ``observed.record`` and, if it allows the claim,
        the patch is sent at once; the server then is the judge of whether
        ``observed`` was still current. If the server refuses (409/422), or
        the protocol refuses on ``observed`` (which may be stale: a held
        lease may have been released since), it falls back to reading.
        After every refusal it re-reads: if the lease is now held, completed
        or exhausted the claim is rejected; if it is still claimable (the
        token moved on: someone claimed and released meanwhile), it tries
        again on the fresh read.

        Requests: with ``observed`` and no race, exactly one PATCH and no
        GET. Otherwise one GET, then one PATCH if the protocol allows the
        claim, and one more GET (and maybe PATCH) per refused write.

        Args:
            namespace: the lease's namespace.
            name: the lease's name.
            claimant: the new holder's identity.
            observed: the lease as the caller last saw it (from a list, a
                watch or a recent read), or ``None`` to read it first. Only
                its ``record`` is used (no ``resourceVersion`` is needed);
                a stale one costs a read, never a wrong result.

        Returns:
            :class:`Accepted` (``.token`` is the new fencing token, ``.lease``
            the server's answer) or :class:`Rejected` with ``LOST_RACE``,
            ``COMPLETED`` or ``EXHAUSTED`` (``.lease`` as read when judging;
            a rejection always comes from a fresh read, never from
            ``observed`` alone).

        Raises:
            LeaseNotFoundError: no such lease.
            InvalidLeaseError: the stored object does not parse.
            TransientStoreError: retry later (also after too many conflicts).
            StoreError: any other refusal, including a write the server
                refuses (422) twice on a lease nobody changed in between (not
                a race: e.g. a holder name the schema does not allow).
        """
        holder = HolderIdentity(claimant)
        if observed is not None:
            decision = protocol.claim(observed.record, holder, self._clock())
            if isinstance(decision, protocol.Allowed):
                ops = _claim_ops(observed.record.fencing_token, decision.record)
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
            ops = _claim_ops(lease.record.fencing_token, decision.record)
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
    ) -> Result:
        """Write ``ops`` guarded by holder + token tests; classify a refusal."""
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                body = self._patch(
                    action, namespace, name, _holder_tests(holder, token) + ops, request_timeout
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
    ) -> Result:
        """Renew: the holder is alive. Exactly one API write, no read before.

        Args:
            namespace: the lease's namespace.
            name: the lease's name.
            holder: the caller's identity.
            token: the caller's fencing token.
            request_timeout: give up on each request after this many seconds
                (``None``: wait); a holder passes the time left before its
                local deadline.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_HOLDER``,
            ``STALE_TOKEN`` or ``COMPLETED``.

        Raises:
            LeaseNotFoundError: no such lease.
            TransientStoreError: retry later.
            StoreError: any other refusal.
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
            lambda r: protocol.renew(r, h, t, now),
            request_timeout,
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
    ) -> Result:
        """Complete: record ``{token, outcome}`` once; the job is done.

        Args:
            namespace: the lease's namespace.
            name: the lease's name.
            holder: the caller's identity.
            token: the caller's fencing token.
            outcome: succeeded or failed.
            message: free text recorded with the completion.
            exit_code: the worker's exit code, if any.
            request_timeout: give up on each request after this many seconds.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_HOLDER``,
            ``STALE_TOKEN`` or ``COMPLETED``.

        Raises:
            LeaseNotFoundError: no such lease.
            TransientStoreError: retry later.
            StoreError: any other refusal.
        """
        h, t = HolderIdentity(holder), FencingToken(token)
        now = self._clock()

        def decide(record: LeaseRecord) -> protocol.Decision:
            return protocol.complete(
                record, h, t, outcome, now, message=message, exit_code=exit_code
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
        return self._guarded(namespace, name, "complete", h, t, ops, decide, request_timeout)

    def release(
        self,
        namespace: str,
        name: str,
        holder: str,
        token: int,
        *,
        request_timeout: float | None = None,
    ) -> Result:
        """Release: the holder gives the lease up; the token is kept.

        Args:
            namespace: the lease's namespace.
            name: the lease's name.
            holder: the caller's identity.
            token: the caller's fencing token.
            request_timeout: give up on each request after this many seconds.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_HOLDER``,
            ``STALE_TOKEN`` or ``COMPLETED``.

        Raises:
            LeaseNotFoundError: no such lease.
            TransientStoreError: retry later.
            StoreError: any other refusal.
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
            lambda r: protocol.release(r, h, t),
            request_timeout,
        )

    def reclaim(self, judged: StoredLease) -> Result:
        """Reclaim an expired lease: unheld, token kept. The operator's write.

        The write carries the ``resourceVersion`` that was judged expired: if
        anything changed since (a renewal), the API server answers 409 and
        nothing is reclaimed.

        Args:
            judged: the exact lease version the caller judged expired.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_EXPIRED`` (it
            changed since it was judged, or it is unheld) or ``COMPLETED``.

        Raises:
            LeaseNotFoundError: no such lease.
            TransientStoreError: retry later.
            StoreError: any other refusal.
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
        ]
        return self._conditional(judged, ops, "reclaim")

    def stop(self, judged: StoredLease) -> Result:
        """Take a lease back for good: unheld, and no claim past its token.

        The operator's write when a job ends without a completion (deadline
        passed, attempts used up): it removes the holder and lowers
        ``spec.maxFencingToken`` to the current token, so no worker can claim
        the lease again (the API server enforces the cap, too).

        Args:
            judged: the lease version the decision was made on; the write is
                conditioned on its ``resourceVersion``.

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``COMPLETED`` (a
            worker completed first: that completion stands) or ``NOT_EXPIRED``
            (it changed since it was judged: re-read and decide again).

        Raises:
            LeaseNotFoundError: no such lease.
            TransientStoreError: retry later.
            StoreError: any other refusal.
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
            ops.append({"op": "remove", "path": "/spec/holderIdentity"})
        return self._conditional(judged, ops, "stop")

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
