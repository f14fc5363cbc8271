"""Pull mode: a worker pool claims the leases of LeasedJobs that have no pod template.

Why a claim may pass ``observed``: a claim judged on the lease as the
worker last saw it (from a LIST or a watch) is one PATCH while that copy is
current; a stale copy costs a read, never a wrong result (see
:meth:`leasehold.lease.store.LeaseStore.claim`).
"""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from typing import Any, Final

from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.leaseops import LeaseOperations, Rejected, StoredLease
from leasehold.names import ENV_POD_UID, LABEL_COMPLETION_INDEX
from leasehold.worker.connection import StoreScope
from leasehold.worker.holder import LeaseHolder, LossCallback
from leasehold.worker.timing import DEFAULT_RENEW_FRACTION

log = logging.getLogger(__name__)

_LATEST: Final = datetime.max.replace(tzinfo=UTC)
"""Sorts a lease without any creation time last among its priority."""


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
    """Claim one lease as ``holder_identity`` (e.g. ``host:pid``) and start renewing it.

    Without ``store`` one is built on a new API client, closed with the
    holder. The other keywords are :class:`LeaseHolder`'s.

    Returns:
        A started :class:`LeaseHolder` whose first deadline counts from the
        start of the claim request, or ``None`` when someone else holds the
        lease or its job is completed.

    Raises:
        LeaseNotFoundError: no such lease.
        TransientStoreError: retry later.
        StoreError: any other refusal.
    """
    scope = StoreScope.open(store)
    with scope.closed_on_error():
        holder = _claim(
            scope,
            namespace,
            lease_name,
            holder_identity,
            observed=observed,
            renew_fraction=renew_fraction,
            margin_seconds=margin_seconds,
            on_lost=on_lost,
        )
        if holder is not None:
            return holder.start()
    scope.close()
    return None


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
    """Claim the next free lease of a namespace (matching ``label_selector``, e.g. ``pool=gpu``).

    That is the one of the highest ``spec.priority`` (copied from its job), and
    among equal priorities the one whose job was created first.

    Held, completed, exhausted, suspended and push-mode leases are skipped (the chart's
    admission policy refuses a worker's claim of a push-mode lease too), and so is a lease
    taken (or deleted) by someone else between the LIST and the claim.
    Requests: one LIST, then one PATCH per lease tried. Arguments as :func:`claim`.

    Returns:
        A started :class:`LeaseHolder`, or ``None`` when no lease was free.

    Raises:
        TransientStoreError: retry later.
        StoreError: any other refusal.
    """
    scope = StoreScope.open(store)
    with scope.closed_on_error():
        for lease in _next_first(scope.store.list_leases(namespace, label_selector=label_selector)):
            record = lease.record
            cap = record.max_fencing_token
            exhausted = cap is not None and record.fencing_token >= cap
            if record.held or record.completion is not None or exhausted or record.suspended:
                continue
            if lease.body.get("spec", {}).get("mode") == "Push":
                continue  # the operator claims it for the pod it creates
            try:
                holder = _claim(
                    scope,
                    namespace,
                    lease.name,
                    holder_identity,
                    observed=lease,
                    renew_fraction=renew_fraction,
                    margin_seconds=margin_seconds,
                    on_lost=on_lost,
                )
            except LeaseNotFoundError:
                continue
            if holder is not None:
                return holder.start()
    scope.close()
    return None


def _claim(
    scope: StoreScope,
    namespace: str,
    lease_name: str,
    holder_identity: str,
    *,
    observed: StoredLease | None,
    renew_fraction: float,
    margin_seconds: float | None,
    on_lost: LossCallback | None,
) -> LeaseHolder | None:
    """One claim request; the holder it returns (not started) owns ``scope``.

    A worker that is a pod (``LEASEHOLD_POD_UID`` set, from the downward API)
    binds the lease to its pod UID in the same write.
    """
    uid = os.environ.get(ENV_POD_UID, "").strip() or None
    extra: dict[str, Any] = {"holder_uid": uid} if uid else {}
    started = time.monotonic()
    result = scope.store.claim(namespace, lease_name, holder_identity, observed=observed, **extra)
    if isinstance(result, Rejected):
        log.info("lease %s/%s not claimed: %s", namespace, lease_name, result.rejection)
        return None
    return LeaseHolder(
        scope,
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
        holder_uid=uid,
        params=result.lease.params,
        completion_index=completion_index(result.lease),
    )


def completion_index(lease: StoredLease) -> int | None:
    """The completion index a lease serves (an Indexed job's index lease), else ``None``.

    Args:
        lease: a stored JobLease.

    Returns:
        The index from the lease's ``leasehold.dev/completion-index`` label (set
        by the operator; workers cannot change a lease's labels).
    """
    labels = lease.body.get("metadata", {}).get("labels") or {}
    raw = str(labels.get(LABEL_COMPLETION_INDEX, ""))
    return int(raw) if raw.isdigit() else None


def _next_first(leases: list[StoredLease]) -> list[StoredLease]:
    """Highest priority first; then the oldest job (the lease may be older than its job)."""

    def order(lease: StoredLease) -> tuple[int, datetime, str]:
        spec = lease.body.get("spec") or {}
        meta = lease.body.get("metadata") or {}
        created = spec.get("jobCreationTimestamp") or meta.get("creationTimestamp")
        when = datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else _LATEST
        return (-lease.priority, when, lease.name)

    return sorted(leases, key=order)
