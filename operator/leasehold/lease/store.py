"""The lease store: each lease operation as ONE atomic write to the API server.

Why this module exists: it is the only code that writes JobLeases. Each
operation is decided by :mod:`leasehold.lease.protocol` and sent as one JSON
patch, which the API server applies inside its own compare-and-swap: ``test``
ops on holder and token (renew, complete, release: no read before the write),
on the token a claim was judged on (:func:`claim_ops` says why that is
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
from datetime import datetime
from typing import Any, Final, cast

from kubernetes import client
from pydantic import ValidationError

from leasehold import names
from leasehold.lease import api, protocol
from leasehold.lease.errors import (
    InvalidLeaseError,
    LeaseNotFoundError,
    WriteRefusedError,
    api_errors,
)
from leasehold.lease.leaseops import (
    MAX_CONFLICT_RETRIES as MAX_CONFLICT_RETRIES,
)
from leasehold.lease.leaseops import (
    UNBIND,
    LeaseWriter,
    completion_body,
    holder_tests,
    stored_from_body,
    utcnow,
)
from leasehold.lease.leaseops import (
    Accepted as Accepted,
)
from leasehold.lease.leaseops import (
    Rejected as Rejected,
)
from leasehold.lease.leaseops import (
    Result as Result,
)
from leasehold.lease.leaseops import (
    StoredLease as StoredLease,
)
from leasehold.lease.leaseops import (
    format_time as format_time,
)
from leasehold.lease.protocol import FencingToken, HolderIdentity, LeaseRecord, Rejection

log = logging.getLogger(__name__)

PLURAL: Final = names.PLURAL_JOB_LEASES

_JSON_PATCH: Final = "application/json-patch+json"


# --------------------------------------------------------------------------
# Conversion


def to_stored(body: dict[str, Any]) -> StoredLease:
    """Parse a JobLease body as returned by the API server, checked against the model.

    The operator's reads go through here; the fields are read by
    :func:`~leasehold.lease.leaseops.stored_from_body` (``leasehold run``'s parser).

    Raises:
        InvalidLeaseError: the body does not match the JobLease model.
    """
    meta = body.get("metadata", {})
    try:
        api.JobLease.model_validate(body)
    except ValidationError as exc:
        raise InvalidLeaseError(
            f"JobLease {meta.get('namespace')}/{meta.get('name')} is invalid: {exc}"
        ) from exc
    return stored_from_body(body)


def _excuse_ops(before: LeaseRecord, after: LeaseRecord) -> list[dict[str, Any]]:
    """JSON-patch ops writing an excuse (:func:`protocol.excuse`), if ``after`` has one."""
    if after.uncounted_attempts == before.uncounted_attempts:
        return []
    return [
        {"op": "add", "path": "/spec/uncountedAttempts", "value": after.uncounted_attempts},
        {"op": "add", "path": "/spec/lastUncountedToken", "value": after.last_uncounted_token},
        {"op": "add", "path": "/spec/maxFencingToken", "value": after.max_fencing_token},
    ]


def _note_ops(judged: StoredLease, reason: str) -> list[dict[str, Any]]:
    """JSON-patch ops noting the reclaim of ``judged``'s token, and why, in its annotations.

    The write they join is conditioned on ``judged``'s ``resourceVersion``, so
    the annotations as judged are the lease's own: when it has none, the map
    is added whole; else each key is added (or replaced).
    """
    note = {
        names.ANNOTATION_RECLAIMED_TOKEN: str(judged.record.fencing_token),
        names.ANNOTATION_RECLAIM_REASON: reason,
    }
    if not (judged.body.get("metadata") or {}).get("annotations"):
        return [{"op": "add", "path": "/metadata/annotations", "value": note}]
    return [
        {"op": "add", "path": "/metadata/annotations/" + _pointer(key), "value": value}
        for key, value in note.items()
    ]


def _pointer(key: str) -> str:
    """``key`` escaped as one JSON-pointer segment (RFC 6901: ``~`` and ``/``)."""
    return key.replace("~", "~0").replace("/", "~1")


def reclaim_note(body: dict[str, Any]) -> tuple[int, str] | None:
    """The reclaim noted on a JobLease: ``(token taken back, reason)``, or ``None``.

    Read from the annotations :meth:`LeaseStore.reclaim` writes; for a lease
    last reclaimed by an operator that noted it in a second write, from
    ``status.lastReclaimedToken`` and ``status.lastReclaimReason``. Of the
    two, the higher token is the later reclaim.

    Args:
        body: the JobLease as read or watched.

    Returns:
        ``(token, reason)``, or ``None`` when no reclaim is noted (or a note
        is malformed).
    """
    notes: list[tuple[int, str]] = []
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    token, reason = (
        annotations.get(names.ANNOTATION_RECLAIMED_TOKEN),
        annotations.get(names.ANNOTATION_RECLAIM_REASON),
    )
    if isinstance(token, str) and token.isdecimal() and reason:
        notes.append((int(token), str(reason)))
    status = body.get("status") or {}
    token, reason = status.get("lastReclaimedToken"), status.get("lastReclaimReason")
    if isinstance(token, int) and reason:
        notes.append((token, str(reason)))
    return max(notes, key=lambda note: note[0]) if notes else None


def _timeout(request_timeout: float | None) -> dict[str, Any]:
    """The client's ``_request_timeout`` keyword, when a timeout is given."""
    return {} if request_timeout is None else {"_request_timeout": request_timeout}


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


@dataclass(frozen=True)
class HeldBy:
    """The pod a lease is created held by: its first attempt, claimed in the create.

    Attributes:
        holder: the pod's name (the holder identity, ``<job>-<token>``).
        holder_uid: the pod's ``metadata.uid``, bound in the same write.
        token: the token the pod was created under (the new lease's base + 1).
    """

    holder: str
    holder_uid: str
    token: int


def new_lease_body(
    namespace: str,
    name: str,
    *,
    job_name: str,
    lease_duration_seconds: int,
    max_fencing_token: int | None = None,
    ceiling_fencing_token: int | None = None,
    initial_fencing_token: int = 0,
    owner_references: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    startup_deadline_seconds: int | None = None,
    job_uid: str | None = None,
    mode: api.LeaseMode | None = None,
    finalizers: list[str] | None = None,
    suspended: bool = False,
    work: WorkItem | None = None,
) -> dict[str, Any]:
    """The body of a new, unheld JobLease of the LeasedJob ``job_name`` (pure).

    ``max_fencing_token`` is the attempt limit (no claim past it);
    ``ceiling_fencing_token`` the limit no write may raise it past (a
    schedule's run: the top of its reserved range);
    ``initial_fencing_token`` is above 0 only when a lost lease is recreated, so
    tokens never go back (it is the incarnation's base token too). The
    operator sets no ``owner_references``: the lease is the name's fencing
    domain and outlives the job; ``finalizers`` (the operator's) keep it
    when someone deletes it. ``job_uid`` names the incarnation it serves,
    ``mode`` who claims it;
    ``startup_deadline_seconds`` bounds an attempt's start (push mode; ``None`` in
    pull mode); ``suspended`` creates it suspended (its job is: nothing may claim);
    ``work`` is the job's params, priority and creation time.

    Returns:
        The object as the API takes it (no ``resourceVersion``: not stored yet).
    """
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner_references:
        metadata["ownerReferences"] = owner_references
    if labels:
        metadata["labels"] = labels
    if finalizers:
        metadata["finalizers"] = finalizers
    lease = api.JobLease(
        metadata=metadata,
        spec=api.JobLeaseSpec(
            job_name=job_name,
            job_uid=job_uid,
            mode=mode,
            lease_duration_seconds=lease_duration_seconds,
            max_fencing_token=max_fencing_token,
            ceiling_fencing_token=ceiling_fencing_token,
            fencing_token=initial_fencing_token,
            startup_deadline_seconds=startup_deadline_seconds,
            base_fencing_token=initial_fencing_token,
            suspended=suspended,
            **(work or WorkItem()).fields(),
        ),
    )
    return lease.to_api()


def held_body(body: dict[str, Any], held_by: HeldBy, now: datetime) -> dict[str, Any]:
    """``body`` (a new, unheld lease) as claimed for ``held_by`` in the same create (pure).

    The claim is judged by :func:`leasehold.lease.protocol.claim` on the
    lease as it would be created, pinned to ``held_by.token`` and to the
    lease's incarnation: the created object is exactly what the unheld
    create followed by that claim would leave (holder, bound UID, token + 1,
    ``acquireTime`` = ``renewTime``), so every rule of the claim holds.

    Args:
        body: a :func:`new_lease_body`.
        held_by: the pod that holds it.
        now: the wall clock, recorded for people.

    Returns:
        A new body; ``body`` is left as it is.

    Raises:
        ValueError: the claim is refused on ``body`` (suspended, its cap at
            its token, or ``held_by.token`` is not its token + 1).
    """
    record = stored_from_body(body).record
    decision = protocol.claim(
        record,
        HolderIdentity(held_by.holder),
        now,
        holder_uid=held_by.holder_uid,
        token=FencingToken(held_by.token),
        job_uid=record.job_uid,
    )
    if not isinstance(decision, protocol.Allowed):
        raise ValueError(
            f"JobLease {body['metadata'].get('name')}: no held create: {decision.rejection}"
        )
    claimed = decision.record
    assert claimed.acquire_time is not None and claimed.holder_uid is not None
    acquired = format_time(claimed.acquire_time)
    spec = {
        **body["spec"],
        "holderIdentity": claimed.holder_identity,
        "holderUID": claimed.holder_uid,
        "fencingToken": claimed.fencing_token,
        "acquireTime": acquired,
        "renewTime": acquired,
    }
    return {**body, "spec": spec}


# --------------------------------------------------------------------------
# The store


class LeaseStore(LeaseWriter):
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
        clock: Callable[[], datetime] = utcnow,
        field_manager: str = "leasehold",
        request_timeout_seconds: float | None = None,
    ) -> None:
        super().__init__(clock=clock)
        self._api = client.CustomObjectsApi(api_client)
        self._field_manager = field_manager
        self._default_timeout = request_timeout_seconds

    def _timeout(self, request_timeout: float | None) -> dict[str, Any]:
        """The client's ``_request_timeout`` keyword for one request."""
        return _timeout(request_timeout if request_timeout is not None else self._default_timeout)

    # -- plain reads and writes ---------------------------------------------

    def _read(
        self, namespace: str, name: str, request_timeout: float | None = None
    ) -> dict[str, Any]:
        """GET the JobLease's body."""
        with api_errors("get", namespace, name):
            body = self._api.get_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                PLURAL,
                name,
                **self._timeout(request_timeout),
            )
        return cast("dict[str, Any]", body)

    def _parse(self, body: dict[str, Any]) -> StoredLease:
        """Check ``body`` against the model, then parse it (:func:`to_stored`)."""
        return to_stored(body)

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
        ceiling_fencing_token: int | None = None,
        initial_fencing_token: int = 0,
        owner_references: list[dict[str, Any]] | None = None,
        labels: dict[str, str] | None = None,
        startup_deadline_seconds: int | None = None,
        job_uid: str | None = None,
        mode: api.LeaseMode | None = None,
        finalizers: list[str] | None = None,
        suspended: bool = False,
        work: WorkItem | None = None,
        held_by: HeldBy | None = None,
    ) -> StoredLease:
        """Create a lease of the LeasedJob ``job_name``: unheld, or held by its first pod.

        The fields are :func:`new_lease_body`'s (the job name, duration, caps,
        incarnation, mode, ...). With ``held_by`` the lease is created already
        claimed for that pod (:func:`held_body`): the first attempt's claim and
        bind folded into the create, one write instead of two. A create is
        conditional on the name being free (409 otherwise), so a held create
        is an atomic claim from "no lease"; the CRD's rules judge the object it
        makes (token within the cap, a held lease not suspended).

        Raises:
            WriteRefusedError: it exists already (status 409), or the schema refused it.
            ValueError: ``held_by`` on a lease that no claim could take
                (suspended, or its cap at its token).
        """
        body = new_lease_body(
            namespace,
            name,
            job_name=job_name,
            lease_duration_seconds=lease_duration_seconds,
            max_fencing_token=max_fencing_token,
            ceiling_fencing_token=ceiling_fencing_token,
            initial_fencing_token=initial_fencing_token,
            owner_references=owner_references,
            labels=labels,
            startup_deadline_seconds=startup_deadline_seconds,
            job_uid=job_uid,
            mode=mode,
            finalizers=finalizers,
            suspended=suspended,
            work=work,
        )
        if held_by is not None:
            body = held_body(body, held_by, self._clock())
        with api_errors("create", namespace, name):
            created = self._api.create_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                PLURAL,
                body,
                field_manager=self._field_manager,
            )
        return to_stored(cast("dict[str, Any]", created))

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

    def reclaim(self, judged: StoredLease, reason: str | None = None) -> Result:
        """Reclaim a lease the operator judged expired: unheld, token kept.

        The write carries ``judged.resource_version``: if the lease changed since (a
        renewal), the server answers 409 and nothing is reclaimed. With a
        ``reason``, the same write notes the taken-back token and the reason in
        the lease's annotations (:data:`~leasehold.names.ANNOTATION_RECLAIMED_TOKEN`,
        :data:`~leasehold.names.ANNOTATION_RECLAIM_REASON`; read back by
        :func:`reclaim_note`): one request, and no moment at which the lease is
        reclaimed but the note missing.

        Args:
            judged: the lease as judged expired.
            reason: why it is taken back (``LeaseExpired``,
                ``StartupDeadlineExceeded``); ``None``: no note.

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
            *holder_tests(judged.record.holder_identity, judged.record.fencing_token),
            {"op": "remove", "path": "/spec/holderIdentity"},
            UNBIND,
        ]
        if reason is not None:
            ops += _note_ops(judged, reason)
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
            ops += [{"op": "remove", "path": "/spec/holderIdentity"}, UNBIND]
        return self._conditional(judged, ops, "stop")

    def close(self, judged: StoredLease, *, release: bool = False) -> Result:
        """Close a lease for good: no claim past its current token, ever.

        A LeasedCronJob closes an earlier run's lease before a new run may
        start (docs/schedules.md): one conditional write lowers both
        ``spec.maxFencingToken`` and ``spec.ceilingFencingToken`` to the
        current token. The ceiling never rises again (the CRD refuses it),
        so neither an excuse, a suspension, a reopen nor a take-over can make
        the lease claimable: whatever the run's own reconciles do next, the
        store refuses its claims. ``Forbid`` keeps the holder (``release``
        false): its attempt may finish (renew, complete, release under its
        token), and once the lease is unheld it is over. ``Replace`` releases
        it in the same write: the holder's next write is refused. A recorded
        completion is kept either way (a Failed one may still be reopened,
        but never claimed again). Conditioned on ``judged.resource_version``.

        Args:
            judged: the lease as read.
            release: also take the lease from its holder (``Replace``).

        Returns:
            :class:`Accepted`, or :class:`Rejected` with ``NOT_EXPIRED`` (it
            changed since: re-read and decide again) or ``COMPLETED`` (it
            changed since, and has a completion now).
        """
        token = judged.record.fencing_token
        ops: list[dict[str, Any]] = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            {"op": "add", "path": "/spec/maxFencingToken", "value": token},
            {"op": "add", "path": "/spec/ceilingFencingToken", "value": token},
        ]
        if release and judged.record.holder_identity is not None:
            ops += [{"op": "remove", "path": "/spec/holderIdentity"}, UNBIND]
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
            {"op": "add", "path": "/spec/lastFailure", "value": completion_body(failure)},
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
                UNBIND,
                {"op": "add", "path": "/spec/suspensions", "value": new.suspensions},
                {
                    "op": "add",
                    "path": "/spec/lastUncountedToken",
                    "value": judged.record.fencing_token,
                },
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
        mode: api.LeaseMode,
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
        set to the current token and the cap to ``token + max_attempts`` (never
        past ``spec.ceilingFencingToken``, which a take-over cannot raise: a
        schedule's run closed before its LeasedJob took it over stays closed). Its
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
        cap = token + max_attempts
        ceiling = judged.record.ceiling_fencing_token
        if ceiling is not None:
            cap = min(cap, ceiling)
        ops: list[dict[str, Any]] = [
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": judged.resource_version,
            },
            {"op": "add", "path": "/spec/jobUID", "value": job_uid},
            {"op": "add", "path": "/spec/mode", "value": str(mode)},
            {"op": "add", "path": "/spec/baseFencingToken", "value": token},
            {"op": "add", "path": "/spec/maxFencingToken", "value": cap},
            {"op": "add", "path": "/spec/leaseDurationSeconds", "value": lease_duration_seconds},
            {
                "op": "add",
                "path": "/spec/startupDeadlineSeconds",
                "value": startup_deadline_seconds,
            },
            {"op": "add", "path": "/spec/holderIdentity", "value": None},
            UNBIND,
            {"op": "add", "path": "/spec/completion", "value": None},
            {"op": "add", "path": "/spec/failures", "value": 0},
            {"op": "add", "path": "/spec/lastFailure", "value": None},
            {"op": "add", "path": "/spec/suspended", "value": suspended},
            {"op": "add", "path": "/spec/suspensions", "value": 0},
            {"op": "add", "path": "/spec/uncountedAttempts", "value": 0},
            {"op": "add", "path": "/spec/lastUncountedToken", "value": None},
        ]
        api_work = api.JobLeaseSpec(job_name="x", **(work or WorkItem()).fields()).to_api()
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
