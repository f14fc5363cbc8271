"""Leases outlive their jobs: each is the fencing domain of its name.

Why this module exists: a fencing token issued under a namespace/name never
repeats and never goes down, across delete and recreate of the job and of its
lease (docs/lifecycle.md, "Across a job's whole life"). So a job that is
gone does not delete its leases: it stops them for good (no holder, the cap
lowered to the current token), and a deleted lease keeps its token behind
its domain finalizer until its namespace goes. Single and indexed jobs share
these rules.
"""

from __future__ import annotations

import logging
from datetime import datetime

from leasehold import names
from leasehold.controller.act.context import Context
from leasehold.lease.api import LeasedJob, LeaseMode
from leasehold.lease.errors import StoreError, TransientStoreError
from leasehold.lease.protocol import lease_is_final
from leasehold.lease.store import Accepted, Result, StoredLease, WorkItem

log = logging.getLogger(__name__)


def stop_for_good(ctx: Context, lease: StoredLease) -> Result | None:
    """Stop a gone job's lease: no holder, the cap at the current token (one write).

    Args:
        ctx: the shared edges and state.
        lease: the lease as read.

    Returns:
        The store's answer (an accepted write is noted as this operator's);
        ``None`` when there was nothing to stop.

    Raises:
        StoreError: the API server failed or refused.
    """
    if lease_is_final(lease.record):
        return None
    result = ctx.store.stop(lease)
    if isinstance(result, Accepted):
        ctx.wrote_lease(result.lease)
    return result


def retire(ctx: Context, lease: StoredLease) -> None:
    """A gone job's lease: taken back for good, kept as the name's domain.

    The lease outlives the job (it is the name's fencing domain), so no
    worker may hold or claim it any more: the holder is removed and the cap
    lowered to the current token. A job created again under the same name
    takes the lease over (:meth:`LeaseStore.rearm`).

    Args:
        ctx: the shared edges and state.
        lease: the job's lease as read.

    Raises:
        TransientStoreError: the lease moved and has no completion: try again.
        StoreError: the API server failed or refused.
    """
    release_if_namespace_goes(ctx, lease)
    result = stop_for_good(ctx, lease)
    if isinstance(result, Accepted):
        log.info(
            "job %s/%s is gone: lease stopped at fencing token %d",
            lease.namespace,
            lease.record.job_name,
            lease.record.fencing_token,
        )
    elif result is not None and result.lease.record.completion is None:
        raise TransientStoreError(f"retire lease {lease.namespace}/{lease.name}: changed, retrying")


def release_if_namespace_goes(ctx: Context, lease: StoredLease) -> None:
    """Drop the domain finalizer of a deleted lease once its namespace is deleted.

    Until then a deleted JobLease stays (Terminating) and keeps its token,
    so deleting it does not reset the name's fencing domain.

    Args:
        ctx: the shared edges and state.
        lease: the lease as read.

    Raises:
        StoreError: the finalizer could not be dropped.
    """
    meta = lease.body.get("metadata") or {}
    if meta.get("deletionTimestamp") is None:
        return
    if names.FINALIZER_DOMAIN not in (meta.get("finalizers") or []):
        return
    try:
        going = ctx.pods.namespace_terminating(lease.namespace)
    except StoreError as exc:
        log.warning(
            "JobLease %s/%s is being deleted but namespace %s cannot be read (%s):"
            " keeping the fencing domain",
            lease.namespace,
            lease.name,
            lease.namespace,
            exc,
        )
        return
    if not going:
        log.info(
            "JobLease %s/%s is being deleted; kept (finalizer %s) as the fencing domain"
            " of its job name until its namespace is deleted",
            lease.namespace,
            lease.name,
            names.FINALIZER_DOMAIN,
        )
        return
    ctx.store.drop_finalizer(lease.namespace, lease.name, names.FINALIZER_DOMAIN)


def mode(job: LeasedJob) -> LeaseMode:
    """Push when the job has a pod template (the operator claims), else pull."""
    return LeaseMode.PUSH if job.spec.template is not None else LeaseMode.PULL


def work_item(job: LeasedJob) -> WorkItem:
    """What a job's leases carry for a pull-mode claimer: params, priority, creation time.

    Each index lease gets the whole ``spec.params`` (its completion index
    tells the worker which part is its own) and the job's ``spec.priority``,
    so ``claim_any`` orders the leases of several jobs by their jobs' priority.

    Args:
        job: the LeasedJob.

    Returns:
        The :class:`~leasehold.lease.store.WorkItem` for ``store.create``/``rearm``.
    """
    created = job.metadata.get("creationTimestamp")
    return WorkItem(
        params=job.spec.params,
        priority=job.spec.priority,
        job_created=(
            datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else None
        ),
    )
