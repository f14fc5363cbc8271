"""A LeasedJob's status, written on purpose through the status subresource.

Why this module exists: single and indexed jobs report the same way. A
status write is conditioned on the version the reconcile read, so a written
version holds nothing the reconcile has not seen and its own watch event can
be skipped (:class:`~leasehold.controller.engines.writes.OwnWrites`); a
refusal means the job changed meanwhile, and that change's own event
reconciles it. An invalid job is told so on the job (a condition, an Event),
never by a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from leasehold import names
from leasehold.controller.act.attempts import ns_name
from leasehold.controller.act.context import Context
from leasehold.controller.kube.objects import Refused
from leasehold.controller.plan import coalesce
from leasehold.controller.plan.conditions import set_condition, with_conditions
from leasehold.controller.plan.pod import pod_selector
from leasehold.lease import api
from leasehold.lease.api import LeasedJob, LeasedJobStatus, Phase
from leasehold.lease.store import StoredLease

log = logging.getLogger(__name__)


def write_status(
    ctx: Context, namespace: str, name: str, body: dict[str, Any], status: LeasedJobStatus
) -> bool:
    """Write a job's status unless unchanged, conditioned on the version read.

    Args:
        ctx: the shared edges and state.
        namespace: the job's namespace.
        name: the job's name.
        body: the job as read (its status and ``resourceVersion``).
        status: the status to write.

    Returns:
        ``False`` if refused (the body read was stale, or the job is gone):
        the cached body is dropped, so the next reconcile reads the job.

    Raises:
        StoreError: another refusal (RBAC, the API server failing).
    """
    new = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    old = body.get("status") or {}
    if new == old:
        return True
    read_version = (body.get("metadata") or {}).get("resourceVersion")
    patch: dict[str, Any] = {"status": {**{k: None for k in old if k not in new}, **new}}
    if read_version:
        patch["metadata"] = {"resourceVersion": read_version}
    written = ctx.jobs.patch_status(namespace, name, patch)
    if isinstance(written, Refused):
        if written is Refused.CONFLICT:
            log.debug("status of %s/%s: changed since read; its event reconciles", namespace, name)
        # Gone (a cached body outlived it: the requeue's GET retires it), or
        # changed since read: forget it either way.
        ctx.job_cache.drop(namespace, name)
        return False
    if read_version:
        version = (written.get("metadata") or {}).get("resourceVersion")
        ctx.own_writes.record("LeasedJob", namespace, name, str(version or ""))
    ctx.job_cache.put(written)  # the next reconcile plans on what was written
    return True


@dataclass(frozen=True)
class StatusWrite:
    """What :func:`write_status_soon` did.

    Attributes:
        ok: ``False`` if the write was refused (the body read was stale, or
            the job is gone: :func:`write_status`).
        held_seconds: seconds until a held-back change of counts is due (the
            caller reconciles the job again then); ``None``: nothing held.
    """

    ok: bool = True
    held_seconds: float | None = None


def write_status_soon(
    ctx: Context, namespace: str, name: str, body: dict[str, Any], status: LeasedJobStatus
) -> StatusWrite:
    """Write a job's status now, or hold a change of counts alone back a moment.

    A change that only moves counts (``ready``, ``active``, ...:
    :func:`~leasehold.controller.plan.coalesce.may_wait`) within the interval
    of :attr:`Context.status_clock` since this job's last write is not
    written: the caller reconciles the job again when the interval ends, and
    that reconcile writes what it then plans (the pods and leases, not the
    status, hold what the counts count, so nothing is lost meanwhile), unless
    a write that may not wait (the phase, a condition's status or reason, a
    terminal state) took the counts along before. A single job's pod Ready,
    seen just after the write that reported its claim, so rides with the
    next write rather than costing one of its own (issue 29).

    Args:
        ctx: the shared edges and state.
        namespace: the job's namespace.
        name: the job's name.
        body: the job as read (its status and ``resourceVersion``).
        status: the status to write.

    Returns:
        What was done: written (or nothing to write), refused, or held back.

    Raises:
        StoreError: the status write failed (not a conflict).
    """
    written = body.get("status") or {}
    planned = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    if planned == written:
        return StatusWrite()
    clock = ctx.status_clock
    now = ctx.monotonic()
    if coalesce.may_wait(written, planned):
        left = clock.wait_left(namespace, name, now)
        if left > 0:
            return StatusWrite(held_seconds=left)
    if not write_status(ctx, namespace, name, body, status):
        return StatusWrite(ok=False)
    if status.phase in (Phase.SUCCEEDED, Phase.FAILED):
        clock.forget(namespace, name)  # a finished job is rarely written again
    else:
        clock.wrote(namespace, name, now)
    return StatusWrite()


def with_pod_counts(ctx: Context, job: LeasedJob, status: LeasedJobStatus) -> LeasedJobStatus:
    """``status`` with ``ready`` and ``terminating`` counted from the pod watch's memory.

    batch/v1 Job's ``status.ready`` (active pods with ``Ready=True``) and
    ``status.terminating`` (pods with a ``deletionTimestamp``, not yet terminal),
    counted as ``countReadyPods`` and ``countTerminatingPods`` do
    (``pkg/controller/job/job_controller.go``), over this incarnation's pods of
    every index. No LIST: the pod watch feeds the memory, and a pod event that
    changes a count triggers the reconcile that writes it.

    Args:
        ctx: the shared edges and state.
        job: the job (its template, name and UID).
        status: the status planned.

    Returns:
        ``status`` with both counts; unchanged in pull mode (no pods) or when no
        pod watch feeds the memory (the counts are unknown).
    """
    if job.spec.template is None:
        return status
    meta = job.metadata
    counts = ctx.pod_memory.counts(
        str(meta.get("namespace", "")), str(meta.get("name", "")), owner_uid=str(meta.get("uid"))
    )
    if counts is None:
        return status
    return status.model_copy(update={"ready": counts.ready, "terminating": counts.terminating})


def with_selector(job: LeasedJob, status: LeasedJobStatus) -> LeasedJobStatus:
    """``status`` with ``selector``: the job's pods as text (:func:`pod_selector`).

    What the scale subresource reads (``labelSelectorPath: .status.selector``),
    as batch/v1's ``spec.selector``; written with every status write, pull
    mode too (it selects no pod there).

    Args:
        job: the job (its UID, ``manualSelector`` and ``selector``).
        status: the status planned.

    Returns:
        ``status`` with ``selector`` set.
    """
    return status.model_copy(update={"selector": pod_selector(job)})


def report_invalid(ctx: Context, body: dict[str, Any], exc: ValidationError) -> None:
    """Tell an invalid LeasedJob so: ``Ready=False`` (``InvalidSpec``) and a Warning Event.

    Args:
        ctx: the shared edges and state.
        body: the job as read.
        exc: what validation found (the first error is told).

    Raises:
        StoreError: the status write failed.
    """
    namespace, name = ns_name(body)
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = f"Invalid LeasedJob: {where}: {first['msg']}"
    log.warning("%s/%s: %s", namespace, name, message)
    ctx.events.record(body, "Warning", "InvalidSpec", message)
    generation = body.get("metadata", {}).get("generation")
    conditions = set_condition(
        [],
        "Ready",
        api.ConditionStatus.FALSE,
        "InvalidSpec",
        message,
        now=ctx.now(),
        generation=generation,
    )
    status = LeasedJobStatus(conditions=conditions, observed_generation=generation)
    write_status(ctx, namespace, name, body, status)


def report_lease_name_taken(
    ctx: Context, job: LeasedJob, body: dict[str, Any], lease: StoredLease
) -> None:
    """The job's lease name is another job's lease (an index of an Indexed job): wait.

    Taking it over would take that index's fencing domain from a live job.
    Index leases are named ``<job>.<index>`` and job names have no dot, so
    only an index lease an earlier version named ``<job>-<index>`` (or a
    JobLease made by hand) can hold a job's lease name.

    Args:
        ctx: the shared edges and state.
        job: the job (validated ``body``).
        body: its raw body.
        lease: the lease of that name, as read.

    Raises:
        StoreError: the status write failed.
    """
    namespace, name = ns_name(body)
    message = (
        f"JobLease {name} belongs to {_owner(lease)}; this job cannot run under that name:"
        " rename it."
    )
    log.warning("%s/%s: %s", namespace, name, message)
    status = with_conditions(
        job,
        job.status or LeasedJobStatus(),
        ("Ready", "False", "LeaseNameTaken", message),
        now=ctx.now(),
    )
    if status != job.status:
        ctx.events.record(body, "Warning", "LeaseNameTaken", message)
    write_status(ctx, namespace, name, body, status)


def report_index_lease_names_taken(
    ctx: Context,
    job: LeasedJob,
    body: dict[str, Any],
    status: LeasedJobStatus,
    taken: Mapping[int, StoredLease],
) -> LeasedJobStatus:
    """Indexes whose lease name another lease holds: ``Ready=False`` and a Warning Event.

    Index leases are ``<job>.<index>`` and no job's name has a dot, so only
    a JobLease made by hand can hold such a name; the index cannot start
    while it exists, and the job cannot finish: it must not wait silently.
    ``Ready`` is set over the condition the job had, so its
    ``lastTransitionTime`` holds while the name stays taken, and the Event
    is recorded when the message is new.

    Args:
        ctx: the shared edges and state.
        job: the job (validated ``body``), with the status it had.
        body: its raw body.
        status: the status planned for this reconcile.
        taken: the lease that holds each such index's name, by index (not empty).

    Returns:
        ``status`` with ``Ready=False`` (``LeaseNameTaken``) naming the lowest such index.
    """
    namespace, name = ns_name(body)
    index = min(taken)
    lease = taken[index]
    others = f" ({len(taken) - 1} more indexes wait the same way)" if len(taken) > 1 else ""
    message = (
        f"Index {index}: JobLease {lease.name} belongs to {_owner(lease)}, not to this"
        f" index; the index cannot start while it exists: delete that JobLease.{others}"
    )
    log.warning("%s/%s: %s", namespace, name, message)
    had = [c for c in (job.status.conditions if job.status else None) or [] if c.type == "Ready"]
    if not had or (had[0].reason, had[0].message) != ("LeaseNameTaken", message):
        ctx.events.record(body, "Warning", "LeaseNameTaken", message)
    generation = job.metadata.get("generation")
    ready = set_condition(
        had,
        "Ready",
        api.ConditionStatus.FALSE,
        "LeaseNameTaken",
        message,
        now=ctx.now(),
        generation=int(generation) if generation is not None else None,
    )
    kept = [c for c in status.conditions or [] if c.type != "Ready"]
    return status.model_copy(update={"conditions": sorted([*kept, *ready], key=lambda c: c.type)})


def _owner(lease: StoredLease) -> str:
    """Whose a JobLease is, for a message: ``job a`` or ``job a (its index 3)``."""
    labels = (lease.body.get("metadata") or {}).get("labels") or {}
    index = labels.get(names.LABEL_COMPLETION_INDEX)
    return f"job {lease.record.job_name}" + (f" (its index {index})" if index is not None else "")
