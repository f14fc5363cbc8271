"""Reclaim: take a lease back once the expiry clock judged it expired.

Why this module exists: expiry is decided by one party, this operator, on
its own monotonic clock (:mod:`leasehold.controller.engines.expiry`). The
reclaim write carries the version that was judged, so a renewal that landed
meanwhile makes it fail; then the lease is read again and judged again. The
same write notes the taken-back token and why (the lease duration after it
started, or the startup bound before) in the lease's annotations, for the
job's next reconcile and for people: a reclaim is one request to the lease
(plus the job's Event).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Final

from leasehold import names
from leasehold.controller.act.context import Context
from leasehold.controller.engines.expiry import ExpiryReason
from leasehold.lease.errors import (
    InvalidLeaseError,
    LeaseNotFoundError,
    TransientStoreError,
)
from leasehold.lease.protocol import LeaseRecord
from leasehold.lease.store import Accepted, StoredLease, to_stored

log = logging.getLogger(__name__)

MAX_TRIES: Final = 8
"""Reads and writes one reclaim may take while the lease keeps changing."""


@dataclass(frozen=True)
class ReclaimOutcome:
    """What :meth:`Reclaimer.reclaim` did.

    Attributes:
        reclaimed: whether this call took the lease back.
        token: the lease's token when judged.
        holder: the holder it was taken from (or ``None``).
        reason: a short word for logs: ``Reclaimed``, ``Renewed``, ``Unheld``,
            ``Completed``, ``Missing``, ``Recreated``, ``QuotaWait``.
    """

    reclaimed: bool
    token: int
    holder: str | None
    reason: str


class Reclaimer:
    """Take back leases the expiry clock judged expired.

    Args:
        ctx: the shared edges and state.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def reclaim(
        self,
        namespace: str,
        lease_name: str,
        judged_generation: int,
        observed: dict[str, Any] | None = None,
        reason: ExpiryReason = ExpiryReason.LEASE_EXPIRED,
    ) -> ReclaimOutcome:
        """Reclaim lease ``namespace``/``lease_name``, judged expired at ``judged_generation``.

        The expiry clock saw no spec change since it first saw that generation, for
        longer than the duration plus the margin. The write is conditioned on a
        ``resourceVersion`` of that generation (of ``observed``, the body as last
        watched, when given; else of a fresh read), so a renewal that landed
        meanwhile makes it fail; then it re-reads, and if the generation moved,
        nothing is reclaimed. ``reason`` says which bound the attempt went past
        (the lease duration after it started, or the startup bound before): it
        is told in the Event and in the lease's annotation
        ``leasehold.dev/last-reclaim-reason``, written by the reclaim itself.

        Runs under the job's lock, as its reconciles do, so none of them acts
        on the lease while it is being judged and taken back.

        Raises:
            TransientStoreError: the API server failed; try again later.
        """
        job_name = str(((observed or {}).get("spec") or {}).get("jobName") or lease_name)
        with self._ctx.locks.hold(namespace, job_name):
            return self._reclaim(namespace, lease_name, judged_generation, observed, reason)

    def _waits_for_quota(self, namespace: str, record: LeaseRecord, reason: ExpiryReason) -> bool:
        """Whether an attempt past its startup bound is only waiting for a ResourceQuota.

        Its pod was refused by a quota and not created since, and the lease
        was never bound to a pod: nothing ran under its token, so it is not
        reclaimed (a reclaim would count an attempt that never started; batch
        Job waits for the quota). The pod create is retried by the job's
        reconciles (``Attempts``); once the pod exists and is bound, the lease
        changes and its clocks start again.
        """
        holder = record.holder_identity
        if reason is not ExpiryReason.STARTUP_DEADLINE_EXCEEDED or holder is None:
            return False
        if record.holder_uid is not None or (namespace, holder) not in self._ctx.quota_held:
            return False
        log.info(
            "not reclaiming %s/%s (token %d): pod %s is refused by a ResourceQuota, nothing ran",
            namespace,
            record.job_name,
            record.fencing_token,
            holder,
        )
        return True

    def _reclaim(
        self,
        namespace: str,
        lease_name: str,
        judged_generation: int,
        observed: dict[str, Any] | None,
        reason: ExpiryReason,
    ) -> ReclaimOutcome:
        judged_uid = ((observed or {}).get("metadata") or {}).get("uid")
        for attempt in range(MAX_TRIES):
            try:
                lease = None
                if attempt == 0 and observed is not None:
                    with contextlib.suppress(InvalidLeaseError):
                        lease = to_stored(observed)  # the watch's copy: no read
                if lease is None:
                    lease = self._ctx.store.get(namespace, lease_name)
            except LeaseNotFoundError:
                return ReclaimOutcome(False, 0, None, "Missing")
            record = lease.record
            if judged_uid and lease.body.get("metadata", {}).get("uid") != judged_uid:
                # Deleted and recreated under the same name: the generation
                # judged belongs to another object; never reclaim this one.
                return ReclaimOutcome(False, record.fencing_token, None, "Recreated")
            if record.completion is not None:
                return ReclaimOutcome(False, record.fencing_token, None, "Completed")
            if lease.generation != judged_generation:
                return ReclaimOutcome(
                    False, record.fencing_token, record.holder_identity, "Renewed"
                )
            if record.holder_identity is None:
                return ReclaimOutcome(False, record.fencing_token, None, "Unheld")
            if self._waits_for_quota(namespace, record, reason):
                return ReclaimOutcome(
                    False, record.fencing_token, record.holder_identity, "QuotaWait"
                )
            result = self._ctx.store.reclaim(lease, str(reason))
            if isinstance(result, Accepted):
                # Told before the cache has it: the reconcile that reads it
                # there records its own Events (the next attempt's, the end's)
                # after this one.
                job = _owner_job(lease)
                if job is not None:
                    self._ctx.events.record(job, "Warning", *_reclaim_event(lease, reason))
                # Cached with its note: the reconcile the reclaim triggers
                # reads the reason from the cache (its watch event is skipped).
                self._ctx.wrote_lease(result.lease)
                log.info(
                    "reclaimed %s/%s from %s (token %d): no renewal seen for %ds + margin",
                    namespace,
                    lease_name,
                    record.holder_identity,
                    record.fencing_token,
                    record.lease_duration_seconds,
                )
                return ReclaimOutcome(
                    True, record.fencing_token, record.holder_identity, "Reclaimed"
                )
            # 409: something changed; re-read and judge again.
        raise TransientStoreError(f"reclaim {namespace}/{lease_name}: kept conflicting")


def _reclaim_event(lease: StoredLease, reason: ExpiryReason) -> tuple[str, str]:
    """The ``(reason, message)`` of the Event recorded on a reclaimed job."""
    record = lease.record
    startup = lease.body.get("spec", {}).get("startupDeadlineSeconds")
    if reason is ExpiryReason.STARTUP_DEADLINE_EXCEEDED:
        return (
            str(reason),
            f"Attempt {record.fencing_token} ({record.holder_identity}) did not start within"
            f" startupDeadlineSeconds={startup}: no renewal and no running pod; took back"
            f" fencing token {record.fencing_token}.",
        )
    return (
        "Reclaimed",
        f"Lease expired: no renewal from {record.holder_identity} for"
        f" {record.lease_duration_seconds}s; took back fencing token {record.fencing_token}.",
    )


def _owner_job(lease: StoredLease) -> dict[str, Any] | None:
    """The LeasedJob incarnation the lease serves (``spec.jobUID``), without a read.

    Enough to record an Event about the job (apiVersion, kind, name, uid).
    """
    if lease.record.job_uid is None:
        return None
    return {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {
            "name": lease.record.job_name,
            "namespace": lease.namespace,
            "uid": lease.record.job_uid,
        },
    }
