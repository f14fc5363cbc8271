"""An attempt's pod: create it under its token, claim the lease bound to it, read how it ended.

Why this module exists: single and indexed jobs start attempts the same way.
The pod is created first, under the token the claim will take (the lease's
token + 1, injected by :func:`~leasehold.controller.plan.pod.build_pod`);
then the lease is claimed bound to the pod's UID in one conditional write
(claim and bind together), so only that pod can ever renew under the token.
A pod whose claim does not land never holds (the store refuses its UID) and
is deleted at once. A taken pod name is adopted only if this job made the
pod; a ResourceQuota that is used up is waited out (backing off, nothing
claimed); a pod the API server refuses fails the job. And the pods of
fenced-off attempts are deleted, but those the job's retention keeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Final, NamedTuple

from leasehold import names
from leasehold.controller.act.context import Context
from leasehold.controller.kube.pods import (
    PodNameTaken,
    PodRefused,
    QuotaExceeded,
    owned_by,
)
from leasehold.controller.plan import retention
from leasehold.controller.plan.conditions import with_conditions
from leasehold.controller.plan.pod import build_pod, pod_facts
from leasehold.controller.plan.single import Action, JobEvent, Plan, PodFacts, failed_status
from leasehold.lease import api, protocol
from leasehold.lease.api import LeasedJob, LeasedJobStatus
from leasehold.lease.errors import TransientStoreError, WriteRefusedError
from leasehold.lease.protocol import FencingToken, HolderIdentity, LeaseRecord
from leasehold.lease.store import Accepted, HeldBy, Result, StoredLease

log = logging.getLogger(__name__)

QUOTA_BACKOFF_SECONDS: Final = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0)
"""Delays before retrying a pod create refused by a ResourceQuota (the last repeats)."""


def ns_name(body: dict[str, Any]) -> tuple[str, str]:
    """An object's ``(namespace, name)`` from its body."""
    meta = body["metadata"]
    return str(meta["namespace"]), str(meta["name"])


class Claimed(NamedTuple):
    """What :meth:`Attempts.claim_and_start` did.

    Attributes:
        plan: the plan with the status to write and the Events to record, or
            ``None`` when no attempt started (the claim was lost, or the pod's
            name is still taken by a pod being deleted): plan again soon.
        result: the claim's answer (the lease as written or as read), or
            ``None`` when no claim was sent.
    """

    plan: Plan | None
    result: Result | None


class Created(NamedTuple):
    """What :meth:`Attempts.start_with_new_lease` did.

    Attributes:
        plan: the plan with the status to write and the Events to record
            (the attempt started, or its pod waits for a quota with no lease
            created), or ``None`` when the lease existed already and the pod
            made for it was deleted: plan again on ``lease``.
        lease: the lease created held by the pod, or as read after a refused
            create (409); ``None`` when nothing was created: a quota (``plan``
            says so), or the API server refused the held lease otherwise
            (``plan`` is ``None`` too: the pod was deleted, create it unheld).
    """

    plan: Plan | None
    lease: StoredLease | None


def _claimable_for(
    record: LeaseRecord,
    pod_name: str,
    pod_uid: str,
    token: int,
    body: dict[str, Any],
    now: datetime,
) -> bool:
    """Whether a claim for the pod ``pod_name`` (``pod_uid``) under ``token`` takes ``record``.

    The lease serves this incarnation (``body``'s UID), is unheld, not
    completed nor suspended, and its token is ``token - 1``: exactly the
    lease the pod was made for (:func:`leasehold.lease.protocol.claim`).
    ``now`` is the wall clock the claim would record (not judged).
    """
    decision = protocol.claim(
        record,
        HolderIdentity(pod_name),
        now,
        holder_uid=pod_uid,
        token=FencingToken(token),
        job_uid=str(body["metadata"]["uid"]),
    )
    return isinstance(decision, protocol.Allowed) and record.job_uid == body["metadata"]["uid"]


class Attempts:
    """Start attempts' pods, claim leases bound to them, and clean up fenced-off pods.

    Args:
        ctx: the shared edges and state.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._quota_refusals: dict[str, int] = {}
        """``namespace/job`` -> pod creates refused by a quota in a row (dropped on success)."""
        self._quota_lock = threading.Lock()
        """Guards :attr:`_quota_refusals`: an Indexed job's steps run on several threads."""

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone: drop what is kept about it.

        Args:
            namespace: the job's namespace.
            name: the job's name.
        """
        self._quota_refusals.pop(f"{namespace}/{name}", None)
        # Copied first: an Indexed job's step threads add to these meanwhile
        # (list() of a dict's items is one step under the GIL; a comprehension
        # over the live dict could see it change size and raise).
        held = self._ctx.quota_held
        for key, job in list(held.items()):
            if key[0] == namespace and job == name:
                held.pop(key, None)
        seen = self._ctx.decided_seen
        for decided in list(seen):
            if decided[:2] == (namespace, name):
                seen.pop(decided, None)

    # -- starting ---------------------------------------------------------------

    def start(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        plan: Plan,
        token: int,
        lease: StoredLease,
        index: int | None = None,
    ) -> Plan:
        """Create the attempt's pod (of completion ``index``, if given) and bind the lease.

        Args:
            job: the job (validated ``body``).
            body: its raw body (Events, the owner's UID).
            plan: the plan that starts it (``pod_name`` set).
            token: the fencing token the attempt runs under.
            lease: the lease as claimed.
            index: the completion index, for an Indexed job.

        Returns:
            The plan with the status to write and the Events to record.

        Raises:
            TransientStoreError: the API server failed, or the pod's name was
                taken by a pod that is gone since; try again.
        """
        ctx = self._ctx
        namespace, name = ns_name(body)
        assert plan.pod_name is not None
        status = _attempt_status(plan, token, lease)
        created = ctx.pods.create(namespace, _pod(job, body, plan, token, lease, index))
        if isinstance(created, PodNameTaken):
            return self._name_taken(body, plan, status, lease, token, created.pod)
        if isinstance(created, QuotaExceeded):
            ctx.quota_held[(namespace, plan.pod_name)] = name
            return self._held_by_quota(body, plan, status, created.message)
        ctx.quota_held.pop((namespace, plan.pod_name), None)
        if isinstance(created, PodRefused):
            return self._refused(body, plan, lease, created.message)
        # Known at once, not only when the pod watch delivers it: a stop planned
        # before then (a cancel, a suspend) must see that this pod may exist.
        ctx.pod_memory.observe(created.pod)
        status = self._started(job, body, plan, status, token)
        uid = str(created.pod["metadata"]["uid"])
        self.bind(lease, plan.pod_name, token, uid, str(body["metadata"]["uid"]))
        return replace(plan, status=status)

    def _started(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        plan: Plan,
        status: LeasedJobStatus,
        token: int,
    ) -> LeasedJobStatus:
        """Say that the attempt's pod was created (condition, log, Event); return the status."""
        ctx = self._ctx
        namespace, name = ns_name(body)
        self._quota_refusals.pop(f"{namespace}/{name}", None)
        log.info("started pod %s/%s under fencing token %d", namespace, plan.pod_name, token)
        ctx.events.record(
            body, "Normal", "Started", f"Created pod {plan.pod_name} (fencing token {token})."
        )
        return with_conditions(
            job,
            status,
            ("PodCreated", "True", "Created", f"Created pod {plan.pod_name}."),
            now=ctx.now(),
        )

    def claim_and_start(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        plan: Plan,
        lease: StoredLease,
        index: int | None = None,
    ) -> Claimed:
        """Create the next attempt's pod under ``plan.token``, then claim the lease bound to it.

        The claim and the bind are one conditional write: the lease must still
        be at ``plan.token - 1``, serve this job incarnation, and be claimable
        (:func:`leasehold.lease.protocol.claim`); it takes ``plan.token`` with
        ``holderUID`` = the pod's UID. Until it lands the pod's ``leasehold run``
        waits (``NOT_BOUND``) and starts nothing. A claim that does not land
        (another replica's claim, a suspend, a take-over, the budget used up)
        leaves that pod without a hold for ever (its UID is never bound): it is
        deleted at once and forgotten by the pod memory. A pod of the name that
        this job made and that is not being deleted (an earlier reconcile's, or
        another replica's whose claim is racing this one) is claimed for as is:
        only one claim for the token lands, and both bind that one pod.

        Args:
            job: the job (validated ``body``).
            body: its raw body (Events, the owner's UID).
            plan: the ``CLAIM_AND_START`` plan (``pod_name`` and ``token`` set).
            lease: the lease as planned on (unheld, at ``plan.token - 1``).
            index: the completion index, for an Indexed job.

        Returns:
            :class:`Claimed`.

        Raises:
            TransientStoreError: the API server failed, or the pod's name was
                taken by a pod that is gone since; try again.
        """
        ctx = self._ctx
        namespace, name = ns_name(body)
        assert plan.pod_name is not None and plan.token is not None
        token = plan.token
        created = ctx.pods.create(namespace, _pod(job, body, plan, token, lease, index))
        if isinstance(created, QuotaExceeded):
            return Claimed(self._held_by_quota(body, plan, plan.status, created.message), None)
        if isinstance(created, PodRefused):
            return Claimed(self._refused(body, plan, lease, created.message), None)
        if isinstance(created, PodNameTaken):
            pod = self._ours_to_claim_for(body, plan, created.pod)
            if pod is None:
                return self._burn(body, plan, lease, token, created.pod)
        else:
            pod = created.pod
            ctx.pod_memory.observe(pod)  # known at once (a stop planned before the watch)
        uid = str(pod["metadata"]["uid"])
        claimed = ctx.store.claim(
            namespace,
            lease.name,
            plan.pod_name,
            observed=lease,
            holder_uid=uid,
            token=token,
            job_uid=str(body["metadata"]["uid"]),
        )
        # The cache is never behind this operator's own writes; the claim's
        # watch event is not skipped (the status planned before it counts it next).
        ctx.lease_cache.put(claimed.lease.body)
        mine = claimed.lease.record.fencing_token == token and (
            claimed.lease.record.holder_uid == uid
        )
        if not mine:
            why = str(getattr(claimed, "rejection", "taken for another pod"))
            self._lost(namespace, name, pod, claimed.lease.record, why)
            return Claimed(None, claimed)
        status = self._started(job, body, plan, _attempt_status(plan, token, lease), token)
        return Claimed(replace(plan, status=status), claimed)

    def start_with_new_lease(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        plan: Plan,
        prospective: StoredLease,
        create: Callable[[HeldBy], StoredLease],
        index: int | None = None,
    ) -> Created | None:
        """A first attempt with no lease yet: the pod first, then the lease created held.

        The create and the first claim are one write: the pod is created
        under ``plan.token`` (the token the claim would take), then the lease
        is created already held by it (``create``, :meth:`LeaseStore.create
        <leasehold.lease.store.LeaseStore.create>` with ``held_by``). A
        create is refused when the name exists (409), so this is a claim from
        "no lease": the lease of another replica, of an earlier reconcile or
        of an earlier incarnation (a cache miss) wins, and the pod made here
        never holds (it is deleted at once, as a lost claim's) unless that
        lease is bound to this very pod. A pod of the name that this job made
        and that is not being deleted (an earlier reconcile's, whose lease
        create never landed: an operator restart) is the one the lease is
        created for.

        Args:
            job: the job (validated ``body``), not suspended, in push mode.
            body: its raw body (Events, the owner's UID).
            plan: the ``CLAIM_AND_START`` plan made on ``prospective``.
            prospective: the lease as the plain create would make it (not stored).
            create: creates the lease held by the given pod; raises
                :class:`~leasehold.lease.errors.WriteRefusedError` as the store does.
            index: the completion index, for an index lease of an Indexed job.

        Returns:
            :class:`Created`, or ``None`` when nothing was created and the
            caller creates the lease unheld as before (the pod's name is
            taken by a pod that is not this job's, or the API server refused
            the pod or the held lease: today's path judges those).

        Raises:
            TransientStoreError: the API server failed, or the pod's name is
                taken by this job's pod being deleted: try again.
        """
        ctx = self._ctx
        namespace, name = ns_name(body)
        assert plan.pod_name is not None and plan.token is not None
        token = plan.token
        created = ctx.pods.create(namespace, _pod(job, body, plan, token, prospective, index))
        if isinstance(created, QuotaExceeded):
            held = self._held_by_quota(body, plan, plan.status, created.message)
            return Created(held, None)  # nothing claimed: the lease comes with the pod
        if isinstance(created, PodRefused):
            return None  # the plain path creates the lease and fails the job on it
        if isinstance(created, PodNameTaken):
            pod = self._ours_to_claim_for(body, plan, created.pod)
            if pod is None:
                return None  # someone else's pod: the plain path moves past its token
        else:
            pod = created.pod
            ctx.pod_memory.observe(pod)  # known at once (a stop planned before the watch)
        uid = str(pod["metadata"]["uid"])
        try:
            lease = create(HeldBy(plan.pod_name, uid, token))
        except WriteRefusedError as exc:
            current = ctx.store.get(namespace, prospective.name) if exc.status == 409 else None
            if current is not None:
                ctx.lease_cache.put(current.body)
            found = (current.record.fencing_token, current.record.holder_uid) if current else None
            if (
                current is not None
                and found != (token, uid)
                and _claimable_for(current.record, plan.pod_name, uid, token, body, ctx.now())
            ):
                # A peer's lease (its plain create), unheld just below the
                # pod's token: its claim for this very pod may be on its way.
                # Claim for the pod on the lease read, as the plain path does;
                # deleting the pod would waste that claim's attempt.
                return Created(None, current)
            if current is None or found != (token, uid):
                self._lost(namespace, name, pod, current.record if current else None, str(exc))
                return Created(None, current)
            lease = current  # an earlier create of ours, for this very pod
        ctx.lease_cache.put(lease.body)
        status = self._started(job, body, plan, _attempt_status(plan, token, prospective), token)
        return Created(replace(plan, status=status), lease)

    def _ours_to_claim_for(
        self, body: dict[str, Any], plan: Plan, existing: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The pod of the attempt's name that already exists, if this attempt may claim for it.

        Yes when this job incarnation made it (controller ownerReference) and
        it is not being deleted: an earlier reconcile created it and never
        claimed (a crash, a lost answer), or another replica is claiming for
        it. ``None`` for a pod someone else made (the caller moves past the
        token).

        Raises:
            TransientStoreError: the pod is gone since the create said 409, or
                it is this job's but being deleted (a lost claim's pod): its
                name is free once it is gone; try again.
        """
        namespace, _ = ns_name(body)
        if existing is None:
            raise TransientStoreError(
                f"pod {namespace}/{plan.pod_name}: gone since create said 409; retrying"
            )
        if not owned_by(existing, str(body["metadata"]["uid"])):
            return None
        if existing["metadata"].get("deletionTimestamp") is not None:
            raise TransientStoreError(
                f"pod {namespace}/{plan.pod_name}: an earlier pod of this name is being"
                " deleted; retrying once it is gone"
            )
        return existing

    def _lost(
        self,
        namespace: str,
        name: str,
        pod: dict[str, Any],
        record: LeaseRecord | None,
        why: str,
    ) -> None:
        """The claim for ``pod`` did not land: the pod never holds; delete and forget it.

        Deleted with its UID as a precondition (a pod made since under its name
        is left alone) and the pod's own grace: its ``leasehold run`` is still
        waiting for the claim and never started the command.

        Args:
            namespace: the job's namespace.
            name: the job's name.
            pod: the pod made (or found) for the claim.
            record: the lease as the refusal found it (``None``: not read).
            why: the refusal, for the log.
        """
        meta = pod["metadata"]
        log.info(
            "%s/%s: claim for pod %s (uid %s) did not land (%s; the lease is at token %s):"
            " deleting the pod, which never held the lease",
            namespace,
            name,
            meta["name"],
            meta["uid"],
            why,
            record.fencing_token if record is not None else "unknown",
        )
        self._ctx.pod_memory.disown(pod)
        self._ctx.pods.delete(namespace, str(meta["name"]), uid=str(meta["uid"]))

    def _burn(
        self,
        body: dict[str, Any],
        plan: Plan,
        lease: StoredLease,
        token: int,
        existing: dict[str, Any] | None,
    ) -> Claimed:
        """A pod of the attempt's name that this job did not make: move past its token.

        The token is claimed unbound and released (the only way to the next
        token and pod name; two writes, as on this rare path before): no pod
        can renew an unbound lease, so that pod never holds it.
        """
        namespace, name = ns_name(body)
        assert plan.pod_name is not None
        uid = (existing or {}).get("metadata", {}).get("uid")
        claimed = self._ctx.store.claim(
            namespace,
            lease.name,
            plan.pod_name,
            observed=lease,
            token=token,
            job_uid=str(body["metadata"]["uid"]),
        )
        self._ctx.lease_cache.put(claimed.lease.body)
        if not isinstance(claimed, Accepted):
            return Claimed(None, claimed)
        message = (
            f"Pod {plan.pod_name} exists but is not this job's (uid {uid});"
            f" released fencing token {token} and moving to the next attempt."
        )
        log.warning("%s/%s: %s", namespace, name, message)
        released = self._ctx.store.release(namespace, lease.name, plan.pod_name, token)
        self._ctx.lease_cache.put(released.lease.body)
        status = plan.status.model_copy(update={"holder_identity": None})
        taken = JobEvent("Warning", "PodNameTaken", message)
        return Claimed(replace(plan, status=status, events=[*plan.events, taken]), released)

    def bind(
        self, lease: StoredLease, pod_name: str, token: int, pod_uid: str, job_uid: str
    ) -> None:
        """Bind the lease to the pod this operator created (its UID, not its name).

        Raises:
            StoreError: the API server failed (a refusal is logged: the lease moved).
        """
        ctx = self._ctx
        bound = ctx.store.bind(lease.namespace, lease.name, pod_name, token, pod_uid)
        if isinstance(bound, Accepted):
            ctx.wrote_lease(bound.lease)
        else:
            ctx.lease_cache.put(bound.lease.body)  # as read when refused: newer than planned on
            log.info(
                "lease %s/%s not bound to pod %s (uid %s, job uid %s): %s",
                lease.namespace,
                lease.name,
                pod_name,
                pod_uid,
                job_uid,
                bound.rejection,
            )

    def bind_own_pod(self, body: dict[str, Any], lease: StoredLease) -> None:
        """Bind a held, unbound push lease to its pod, if this job created that pod.

        The bind right after the pod create can fail (a crash, an API error);
        until it lands the pod's renewals are refused as ``NOT_BOUND``. Only
        a pod whose controller ownerReference is this job's UID is bound: a
        pod of the holder's name that someone else made never is.

        Raises:
            StoreError: the API server failed.
        """
        record = lease.record
        if record.holder_identity is None or record.holder_uid is not None:
            return
        namespace, _ = ns_name(body)
        pod = self._ctx.pods.read(namespace, record.holder_identity)
        if pod is None:
            return  # not created yet, or gone: the plan takes care of it
        job_uid = str(body["metadata"]["uid"])
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") is None and owned_by(pod, job_uid):
            self.bind(lease, record.holder_identity, record.fencing_token, meta["uid"], job_uid)

    def _name_taken(
        self,
        body: dict[str, Any],
        plan: Plan,
        status: LeasedJobStatus,
        lease: StoredLease,
        token: int,
        existing: dict[str, Any] | None,
    ) -> Plan:
        """The attempt's pod name is taken: adopt the pod only if this job created it.

        "Created by this job" is the pod's controller ownerReference naming
        this job's UID (an earlier reconcile crashed after creating it). Any
        other pod of that name (an earlier incarnation's, still terminating;
        one a user made) is not this attempt: the lease is released, so that
        pod can never renew, complete or release it, and the next attempt
        runs under the next token and pod name.
        """
        namespace, _ = ns_name(body)
        assert plan.pod_name is not None
        if existing is None:
            raise TransientStoreError(
                f"pod {namespace}/{plan.pod_name}: gone since create said 409; retrying"
            )
        job_uid = str(body["metadata"]["uid"])
        meta = existing["metadata"]
        if owned_by(existing, job_uid) and meta.get("deletionTimestamp") is None:
            self.bind(lease, plan.pod_name, token, str(meta["uid"]), job_uid)
            return replace(plan, status=status)
        message = (
            f"Pod {plan.pod_name} exists but is not this job's (uid {meta.get('uid')});"
            f" released fencing token {token} and moving to the next attempt."
        )
        log.warning("%s/%s: %s", namespace, body["metadata"]["name"], message)
        released = self._ctx.store.release(namespace, lease.name, plan.pod_name, token)
        self._ctx.lease_cache.put(released.lease.body)
        status = plan.status.model_copy(update={"holder_identity": None})
        taken = JobEvent("Warning", "PodNameTaken", message)
        return replace(plan, status=status, events=[*plan.events, taken])

    def _held_by_quota(
        self, body: dict[str, Any], plan: Plan, status: LeasedJobStatus, refusal: str
    ) -> Plan:
        """A ResourceQuota refused the pod: transient. Say why, retry later.

        A next attempt's pod is refused before its claim (:meth:`claim_and_start`):
        nothing is claimed, no token spent. A lease held for a pod not created
        (claimed by an earlier version, which claimed first: ``START_POD``)
        stays held by the pod's name, unbound: no pod exists, so no worker can
        write under its token; its expiry clock has not started (no renewal
        yet), and the startup bound does not reclaim it while the quota
        refuses (``Context.quota_held``, :mod:`.reclaim`). Either way, as
        batch/v1 Job, the job waits for the quota without using its attempts.
        Each refusal in a row doubles the delay (:data:`QUOTA_BACKOFF_SECONDS`).
        """
        namespace, name = ns_name(body)
        key = f"{namespace}/{name}"
        with self._quota_lock:
            refusals = self._quota_refusals.get(key, 0)
            self._quota_refusals[key] = refusals + 1
        delay = QUOTA_BACKOFF_SECONDS[min(refusals, len(QUOTA_BACKOFF_SECONDS) - 1)]
        message = (
            f"Pod {plan.pod_name} was refused by a ResourceQuota; retrying in {delay:g}s: {refusal}"
        )
        log.info("%s: %s", key, message)
        job = LeasedJob.model_validate(body)
        held = with_conditions(
            job,
            status.model_copy(update={"phase": api.Phase.PENDING, "pod_name": None}),
            ("PodCreated", "False", "QuotaExceeded", message),
            ("Ready", "False", "QuotaExceeded", message),
            now=self._ctx.now(),
        )
        events = list(plan.events)
        if refusals == 0:  # one Event per streak, not one per retry
            events.append(JobEvent("Warning", "QuotaExceeded", message))
        if plan.requeue_after_seconds is not None:
            delay = min(delay, plan.requeue_after_seconds)
        return replace(plan, status=held, events=events, requeue_after_seconds=delay)

    def _refused(self, body: dict[str, Any], plan: Plan, lease: StoredLease, refusal: str) -> Plan:
        """The API server refused the job's pod: a bad template. Fail the job."""
        ctx = self._ctx
        message = f"The pod template was rejected: {refusal}"
        log.warning("%s/%s: %s", *ns_name(body), message)
        current = ctx.store.get(lease.namespace, lease.name)
        stopped = ctx.store.stop(current)
        ctx.lease_cache.put(stopped.lease.body)
        status = failed_status(
            LeasedJob.model_validate(body), plan.status, "PodCreateFailed", message, now=ctx.now()
        )
        return Plan(
            Action.STOP, status, [*plan.events, JobEvent("Warning", "PodCreateFailed", message)]
        )

    # -- reading and cleaning up ------------------------------------------------

    def pod_facts(
        self,
        namespace: str,
        name: str,
        index: int | None = None,
        *,
        owner_uid: str,
        listed: bool = True,
    ) -> dict[int, PodFacts]:
        """The attempt pods of a job incarnation (or of one index) by token, with those gone.

        Only pods that ``owner_uid`` (the LeasedJob incarnation) controls: a
        pod someone else made with the job's labels, or one of an earlier
        incarnation, tells nothing of this incarnation's attempts (it could
        otherwise excuse an attempt with a ``DisruptionTarget`` it never had).

        A pod the list no longer returns (deleted right after its containers
        stopped, as after an eviction) is told by its last state the pod
        watch saw (:class:`~leasehold.controller.engines.pods.PodMemory`).
        Without ``listed`` (the lease is held: the pods only fill in the
        attempt's pod UID and node), the pod watch's states alone, when a pod
        watch feeds them.

        Raises:
            StoreError: the list failed.
        """
        memory = self._ctx.pod_memory
        if not listed and memory.fed:
            return memory.recall(namespace, name, index, owner_uid=owner_uid)
        selector = f"{names.LABEL_JOB}={name}"
        if index is not None:
            selector += f",{names.LABEL_COMPLETION_INDEX}={index}"
        found = self._ctx.pods.list(namespace, selector)
        facts = memory.recall(namespace, name, index, owner_uid=owner_uid)
        present: set[int] = set()
        for pod in found:
            parsed = pod_facts(pod)
            if (
                parsed is not None
                and parsed[1].owner_uid == owner_uid
                and not memory.disowned(parsed[1].uid)
            ):
                facts[parsed[0]] = parsed[1]
                present.add(parsed[0])
        # A pod the list no longer returns is gone, whatever the memory last saw
        # (a watch that missed its deletion must not hold a next attempt back).
        memory.settle(namespace, name, index, present)
        return {t: f if t in present else f._replace(gone=True) for t, f in facts.items()}

    def pods_left(self, namespace: str, name: str, *, owner_uid: str, listed: bool = True) -> int:
        """How many of a job incarnation's pods are not terminal yet (any index).

        A pod is terminal once its phase is ``Succeeded`` or ``Failed``, or it
        is gone; one being deleted still counts until then (batch/v1 waits for
        such pods before ``Complete``/``Failed`` too).

        Args:
            namespace: the job's namespace.
            name: the job's name.
            owner_uid: the LeasedJob incarnation that must control the pods.
            listed: list the job's pods (and teach the pod watch's memory
                what the list shows: the pods it returned, and that those it
                did not are gone; only for a decided job, which makes no pod
                any more); ``False``: count from that memory, as
                the pod watch has kept it since (no request), unless it
                cannot tell
                (:meth:`~leasehold.controller.engines.pods.PodMemory.left`), then list.

        Returns:
            The count (0 when none are left).

        Raises:
            StoreError: the list failed.
        """
        memory = self._ctx.pod_memory
        if not listed:
            left = memory.left(namespace, name, owner_uid=owner_uid)
            if left is not None:
                return left
        pods = self._ctx.pods.list(namespace, f"{names.LABEL_JOB}={name}")
        owned = [pod for pod in pods if owned_by(pod, owner_uid)]
        for pod in owned:
            memory.observe(pod)
        present = {str((pod.get("metadata") or {}).get("uid")) for pod in owned}
        memory.settle_all(namespace, name, owner_uid=owner_uid, present=present)
        return sum(
            1
            for pod in owned
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )

    def delete_fenced(self, namespace: str, name: str, plan: Plan) -> None:
        """Delete the pods the plan fenced off, but those its retention keeps.

        No list when the pod watch saw no pod below the token (a job's first
        attempt, the usual case).

        Raises:
            StoreError: the list or a delete failed.
        """
        if not self._ctx.pod_memory.may_have_below(namespace, name, plan.delete_pods_below_token):
            return
        deletion = retention.PodDeletion(
            plan.delete_pods_below_token, plan.keep_ended_pods, plan.keep_pod_tokens
        )
        self.delete_stale(namespace, name, deletion)

    def delete_stale(
        self,
        namespace: str,
        name: str,
        deletion: retention.PodDeletion,
        *,
        owner_uid: str | None = None,
    ) -> None:
        """Delete a single job's pods that ``deletion`` chooses (with the pods' own grace).

        Raises:
            StoreError: the list or a delete failed.
        """
        pods = self._ctx.pods.list(namespace, f"{names.LABEL_JOB}={name}")
        for pod_name in retention.stale_pods(pods, deletion, owner_uid=owner_uid):
            log.info("deleting stale pod %s/%s", namespace, pod_name)
            # The pod's own grace period applies: its lease is already gone,
            # so anything it still does under its token is fenced.
            self._ctx.pods.delete(namespace, pod_name)

    def delete_index_pods(
        self,
        namespace: str,
        name: str,
        index: int | None,
        below_token: int | None,
        *,
        keep_ended: bool = False,
        keep: frozenset[tuple[int, int]] = frozenset(),
    ) -> None:
        """Delete an Indexed job's pods (of one index, below a token), as a single job's.

        ``keep_ended`` spares the pods that ended (Succeeded, Failed); ``keep``
        the pods of these ``(index, token)`` attempts.

        Raises:
            StoreError: the list or a delete failed.
        """
        selector = f"{names.LABEL_JOB}={name}"
        if index is not None:
            selector += f",{names.LABEL_COMPLETION_INDEX}={index}"
        pods = self._ctx.pods.list(namespace, selector)
        chosen = retention.index_pods_to_delete(
            pods, below_token=below_token, keep_ended=keep_ended, keep=keep
        )
        for pod_name in chosen:
            self._ctx.pods.delete(namespace, pod_name)


def _pod(
    job: LeasedJob,
    body: dict[str, Any],
    plan: Plan,
    token: int,
    lease: StoredLease,
    index: int | None,
) -> dict[str, Any]:
    """The attempt's pod under ``token`` (:func:`~leasehold.controller.plan.pod.build_pod`)."""
    assert plan.pod_name is not None
    return build_pod(
        job,
        namespace=ns_name(body)[0],
        holder=plan.pod_name,
        token=token,
        owner_uid=str(body["metadata"]["uid"]),
        lease_duration_seconds=lease.record.lease_duration_seconds,
        index=index,
        index_failures=(
            (lease.record.failures, lease.record.uncounted_attempts)
            if index is not None and job.spec.backoff_limit_per_index is not None
            else None
        ),
    )


def _attempt_status(plan: Plan, token: int, lease: StoredLease) -> LeasedJobStatus:
    """The plan's status with the attempt's pod, holder, token and attempt count."""
    return plan.status.model_copy(
        update={
            "pod_name": plan.pod_name,
            "holder_identity": plan.pod_name,
            "fencing_token": token,
            "attempts": token - lease.record.base_fencing_token,
        }
    )
