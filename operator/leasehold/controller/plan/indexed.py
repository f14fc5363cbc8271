"""Pure decisions for a LeasedJob with several completions: one lease per index.

Why this module exists: an Indexed job (``spec.completionMode: Indexed``, or
``spec.completions`` above 1) runs each index under a JobLease of its own
(``<job>-<index>``), its own fencing domain with its own attempts, failures
and take-overs. Each index is planned by the single-lease planner
(:func:`leasehold.controller.plan.single.plan`) as a *sub-job*: the job's spec
with the index's failure budget, named after the index's lease, its status
made from the lease alone (so nothing per index needs to be stored on the
job); ``spec.suspend`` reaches every index that way (each index's lease is
suspended and resumed as a single job's). This module adds what is the
job's: which indexes may start (``spec.parallelism``), the per-index
budgets (``backoffLimitPerIndex``, ``maxFailedIndexes``), the job's end,
and batch/v1 Job's status (``completedIndexes``/``failedIndexes`` as
ranges, counts, conditions, ``Suspended``).

No Kubernetes client or Kopf import: inputs are models and lease records;
:mod:`leasehold.controller.act.indexed` carries the plan out.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from leasehold.controller.plan import single as reconcile
from leasehold.controller.plan import suspension
from leasehold.controller.plan.conditions import set_condition
from leasehold.controller.plan.single import Action, JobEvent, Plan, PodFacts
from leasehold.lease import indexes as index_sets
from leasehold.lease.api import CompletionMode, ConditionStatus, LeasedJob, LeasedJobStatus, Phase
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.protocol import LeaseRecord, Outcome


class IndexState(enum.StrEnum):
    """Where one index is."""

    PENDING = "Pending"
    """Not started, between attempts (reclaimed, backing off) or waiting for a pool."""
    ACTIVE = "Active"
    """Its lease is held."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    """Failed for good: its failure budget or its attempts are used up."""


@dataclass(frozen=True)
class IndexStep:
    """What to do for one index (a single-lease plan on that index's lease).

    Attributes:
        index: the completion index.
        lease_name: its JobLease.
        plan: the sub-job's plan; ``CREATE_LEASE`` for an index that starts now.
    """

    index: int
    lease_name: str
    plan: Plan


@dataclass(frozen=True)
class IndexedPlan:
    """The decision for one job with several completions.

    Attributes:
        status: the job's status to write.
        steps: the indexes to act on, in order.
        events: Events to record on the job.
        delete_pods: the job finished: delete its pods that are left.
        requeue_after_seconds: reconcile again after this long even if nothing
            changes (a backoff, the deadline).
    """

    status: LeasedJobStatus
    steps: list[IndexStep] = field(default_factory=list)
    events: list[JobEvent] = field(default_factory=list)
    delete_pods: bool = False
    requeue_after_seconds: float | None = None


def is_multi(job: LeasedJob) -> bool:
    """Whether the job runs one lease per index (this module) or one lease (as always).

    Args:
        job: the LeasedJob.

    Returns:
        ``True`` for ``completionMode: Indexed`` or ``completions`` above 1.
    """
    return job.spec.completion_mode == CompletionMode.INDEXED or (job.spec.completions or 1) > 1


def completions(job: LeasedJob) -> int:
    """The job's number of indexes (``spec.completions``, default 1)."""
    return job.spec.completions or 1


def parallelism(job: LeasedJob) -> int:
    """How many indexes may be held at once (``spec.parallelism``, default 1, as batch Job)."""
    return job.spec.parallelism or 1


def index_backoff_limit(job: LeasedJob) -> int:
    """The failures one index may retry: ``backoffLimitPerIndex``, else ``backoffLimit``.

    Without ``backoffLimitPerIndex`` the job also fails once all indexes
    together failed more than ``backoffLimit`` times (batch Job's rule).
    """
    per_index = job.spec.backoff_limit_per_index
    return job.spec.backoff_limit if per_index is None else per_index


def index_max_fencing_token_span(job: LeasedJob) -> int:
    """Claims one index may make above its base token: the index lease's cap."""
    return job.spec.max_attempts + index_backoff_limit(job)


def sub_job(
    job: LeasedJob,
    index: int,
    lease: LeaseRecord | None,
    retry_after: datetime | None = None,
) -> LeasedJob:
    """The single-lease job that stands for one index, for :func:`reconcile.plan`.

    Named after the index's lease (so its pods are ``<job>-<index>-<token>``),
    with the index's failure budget; the job's deadline and cancel are
    judged here, for all indexes at once. Its status is made from the lease:
    the pod was created when the lease is bound to a pod, the failures are
    the lease's, and ``retry_after`` is when a backoff ends (the operator
    keeps it in memory: after a restart the delay starts again, late, never
    early).

    Args:
        job: the LeasedJob.
        index: the completion index.
        lease: the index's lease record, if it exists.
        retry_after: the end of the index's current backoff, if known.

    Returns:
        A LeasedJob that exists only in memory.
    """
    meta = job.metadata
    spec = job.spec.model_copy(
        update={
            "backoff_limit": index_backoff_limit(job),
            "active_deadline_seconds": None,
            "cancel": False,
            "completions": None,
            "parallelism": None,
            "completion_mode": CompletionMode.NON_INDEXED,
            "backoff_limit_per_index": None,
            "max_failed_indexes": None,
        }
    )
    status = LeasedJobStatus(next_attempt_after=retry_after)
    if suspension.is_suspended(job.status):  # a resume starts each index at once
        status.conditions = [
            c
            for c in (job.status.conditions if job.status is not None else None) or []
            if c.type == suspension.CONDITION
        ]
    if lease is not None:
        failed_now = lease.completion is not None and lease.completion.outcome == Outcome.FAILED
        status.failed = lease.failures + (1 if failed_now else 0)
        if lease.holder_uid is not None:
            status.pod_name = lease.holder_identity
    return LeasedJob(
        metadata={
            "name": index_lease_name(str(meta.get("name", "")), index),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "generation": meta.get("generation"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        spec=spec,
        status=status,
    )


def plan_index(
    job: LeasedJob,
    index: int,
    lease: LeaseRecord | None,
    *,
    now: datetime,
    last_reclaim_reason: str | None = None,
    retry_after: datetime | None = None,
    pods: Mapping[int, PodFacts] | None = None,
) -> Plan:
    """The single-lease plan of one index.

    Args:
        job: the LeasedJob.
        index: the completion index.
        lease: that index's lease record, or ``None`` before it was created.
        now: the current wall-clock time (status stamps only).
        last_reclaim_reason: why the lease's current token was taken back, if it was.
        retry_after: the end of the index's backoff, if one runs.
        pods: the index's attempt pods by token (see :func:`wants_pod_facts`):
            how its last attempt ended (an eviction is excused, as a single job's).

    Returns:
        The plan; ``plan.status.phase`` says where the index is.
    """
    sub = sub_job(job, index, lease, retry_after)
    return reconcile.plan(
        sub,
        lease,
        now=now,
        pod_created_for_holder=lease is not None and lease.holder_uid is not None,
        last_reclaim_reason=last_reclaim_reason,
        pods=dict(pods) if pods else None,
    )


def wants_pod_facts(job: LeasedJob, lease: LeaseRecord) -> bool:
    """Whether an index's plan would judge its pods (the service then lists that index's).

    Only when an attempt of a push job ended undecided: unheld, above the
    base token, without a success, not yet excused. Its pod then tells
    whether the failure rules (or an eviction's ``DisruptionTarget``) excuse
    it; a running or succeeded index costs no read.

    Args:
        job: the LeasedJob.
        lease: the index's lease record.

    Returns:
        ``True`` when the index's pods should be read for this reconcile.
    """
    if job.spec.template is None or lease.holder_identity is not None:
        return False
    done = lease.completion
    if done is not None and done.outcome != Outcome.FAILED:
        return False
    token = lease.fencing_token
    return token > lease.base_fencing_token and lease.last_uncounted_token != token


def _state(plan: Plan, lease: LeaseRecord | None, job_uid: str | None) -> IndexState:
    phase = plan.status.phase
    if phase == Phase.SUCCEEDED:
        return IndexState.SUCCEEDED
    if phase == Phase.FAILED:
        return IndexState.FAILED
    if lease is not None and lease.holder_identity is not None and lease.job_uid == job_uid:
        return IndexState.ACTIVE
    return IndexState.PENDING


def _stopped(lease: LeaseRecord) -> bool:
    """Unheld with its cap at its token: no claim can take it any more."""
    cap = lease.max_fencing_token
    return lease.holder_identity is None and cap is not None and cap <= lease.fencing_token


def plan_indexed(
    job: LeasedJob,
    leases: Mapping[int, LeaseRecord],
    *,
    now: datetime,
    elapsed_seconds: float = 0.0,
    last_reclaim_reasons: Mapping[int, str | None] | None = None,
    retry_after: Mapping[int, datetime] | None = None,
    pods: Mapping[int, Mapping[int, PodFacts]] | None = None,
) -> IndexedPlan:
    """Decide what to do next for a job with several completions.

    Args:
        job: the LeasedJob (spec and current status).
        leases: the lease record of each index that has one, by index.
        now: the current wall-clock time (status stamps only).
        elapsed_seconds: how long the job has existed (the operator's clocks),
            judged against ``activeDeadlineSeconds``.
        last_reclaim_reasons: per index, why its current token was taken back.
        retry_after: per index, the end of its current backoff, if known.
        pods: per index, its attempt pods by token, where read.

    Returns:
        The :class:`IndexedPlan`. Each index is planned by the single-lease
        planner; an index without a lease starts (``CREATE_LEASE``) only while
        fewer than ``parallelism`` are held (push mode) or open for a pool
        (pull mode).
    """
    reasons = last_reclaim_reasons or {}
    backoffs = retry_after or {}
    generation = job.metadata.get("generation")
    gen = int(generation) if generation is not None else None
    status = (job.status or LeasedJobStatus()).model_copy(deep=True)
    if status.phase in (Phase.SUCCEEDED, Phase.FAILED):
        return IndexedPlan(status)
    total = completions(job)
    indexed = job.spec.completion_mode == CompletionMode.INDEXED
    pull = job.spec.template is None
    uid = job.metadata.get("uid")
    name = str(job.metadata.get("name", ""))
    created = job.metadata.get("creationTimestamp")
    if status.start_time is None:
        status.start_time = (
            datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else now
        )
    known_done = index_sets.parse(status.completed_indexes)
    known_failed = index_sets.parse(status.failed_indexes)

    plans: dict[int, Plan] = {}
    states: dict[int, IndexState] = {}
    failures = 0
    attempts = 0
    for index in range(total):
        lease = leases.get(index)
        if lease is None:
            if index in known_done:
                states[index] = IndexState.SUCCEEDED  # its lease was deleted after it succeeded
            continue
        plan = plan_index(
            job,
            index,
            lease,
            now=now,
            last_reclaim_reason=reasons.get(index),
            retry_after=backoffs.get(index),
            pods=(pods or {}).get(index),
        )
        plans[index] = plan
        states[index] = _state(plan, lease, str(uid) if uid is not None else None)
        if lease.job_uid == uid:
            failures += plan.status.failed or 0
            attempts += lease.fencing_token - lease.base_fencing_token

    done = {i for i, s in states.items() if s is IndexState.SUCCEEDED}
    failed = {i for i, s in states.items() if s is IndexState.FAILED}
    active = {i for i, s in states.items() if s is IndexState.ACTIVE}
    events: list[JobEvent] = []
    for index in sorted(failed - known_failed):
        for event in plans[index].events:
            events.append(JobEvent(event.type, event.reason, f"Index {index}: {event.message}"))
    for index, plan in sorted(plans.items()):
        if index not in backoffs and plan.status.next_attempt_after is not None:
            events.extend(
                JobEvent(e.type, e.reason, f"Index {index}: {e.message}")
                for e in _backoff_events(plan)
            )

    status.completed_indexes = index_sets.compress(done) if indexed else None
    status.failed_indexes = index_sets.compress(failed) if indexed and failed else None
    status.succeeded = len(done)
    status.active = len(active)
    status.failed = failures
    status.attempts = attempts
    status.completion_progress = f"{len(done)}/{total}"
    status.lease_name = None
    status.holder_identity = None
    status.fencing_token = None
    status.pod_name = None

    end = _end(job, done, failed, failures, total, elapsed_seconds)
    if end is not None:
        outcome, reason, message = end
        status = _finish(status, outcome, reason, message, now=now, generation=gen)
        status.active = 0
        stops = [
            IndexStep(i, index_lease_name(name, i), replace_action(plans[i], Action.STOP))
            for i in sorted(plans)
            if states[i] not in (IndexState.SUCCEEDED, IndexState.FAILED)
            and not _stopped(leases[i])
            and leases[i].completion is None
            and leases[i].job_uid == uid
        ]
        events.append(
            JobEvent("Normal" if outcome == Outcome.SUCCEEDED else "Warning", reason, message)
        )
        return IndexedPlan(status, stops, events, delete_pods=not pull)

    steps: list[IndexStep] = []
    requeue: float | None = None
    open_slots = parallelism(job) - len(active)
    if pull:  # a pool claims: every unfinished lease that exists is open for it
        open_slots = parallelism(job) - sum(
            1 for i in plans if states[i] in (IndexState.ACTIVE, IndexState.PENDING)
        )
    for index in range(total):
        found = plans.get(index)
        if found is None:
            if index in states:
                continue  # known done
            if open_slots <= 0 or job.spec.suspend:  # a suspended job starts no index
                continue
            open_slots -= 1
            steps.append(
                IndexStep(index, index_lease_name(name, index), Plan(Action.CREATE_LEASE, status))
            )
            continue
        plan = found
        if plan.requeue_after_seconds is not None:
            requeue = (
                plan.requeue_after_seconds
                if requeue is None
                else min(requeue, plan.requeue_after_seconds)
            )
        if states[index] in (IndexState.SUCCEEDED, IndexState.FAILED):
            if plan.action is Action.STOP and not _stopped(leases[index]):
                steps.append(IndexStep(index, index_lease_name(name, index), plan))
            continue
        starts = not pull and plan.action in (
            Action.CLAIM_AND_START,
            Action.RETRY,
            Action.TAKE_OVER_LEASE,
            Action.RESUME,  # a resumed index is claimed at once: it needs a slot
            Action.EXCUSE,  # so is an evicted one
        )
        if starts:
            if open_slots <= 0:
                continue
            open_slots -= 1
        if (
            plan.action is not Action.NONE
            or plan.status.next_attempt_after is not None  # a backoff to remember
            or (not pull and leases[index].holder_identity is not None)  # bound yet?
        ):
            steps.append(IndexStep(index, index_lease_name(name, index), plan))

    running = bool(active) or any(s.plan.action is Action.CLAIM_AND_START for s in steps)
    true, false = ConditionStatus.TRUE, ConditionStatus.FALSE
    message = (
        f"{len(active)} of parallelism={parallelism(job)} indexes held; {len(done)} of"
        f" {total} succeeded" + (f", {len(failed)} failed" if failed else "") + "."
    )
    conditions = list(status.conditions or [])
    for type_, cstatus, reason in (
        ("Ready", true, "Running" if running else "Waiting"),
        ("LeaseHeld", true if active else false, "Claimed" if active else "Unheld"),
    ):
        conditions = set_condition(
            conditions, type_, cstatus, reason, message, now=now, generation=gen
        )
    status.conditions = conditions
    status.phase = Phase.RUNNING if running else Phase.PENDING
    status.observed_generation = gen
    status = _suspension_status(job, status, active, now=now, generation=gen)
    flip = suspension.transition(job.status, status)
    if flip is not None:
        events.insert(0, JobEvent(*flip))
    deadline = job.spec.active_deadline_seconds
    if deadline is not None:
        until = max(0.0, deadline - elapsed_seconds)
        requeue = until if requeue is None else min(requeue, until)
    return IndexedPlan(status, steps, events, requeue_after_seconds=requeue)


def _suspension_status(
    job: LeasedJob,
    status: LeasedJobStatus,
    active: set[int],
    *,
    now: datetime,
    generation: int | None,
) -> LeasedJobStatus:
    """``status`` with the job's ``Suspended`` condition (batch/v1 Job's), if it applies.

    Suspended: phase ``Suspended``, no index held once their leases are
    suspended (``active`` are those still held while the suspend writes go
    out). Resumed: the condition turns False (``JobResumed``).
    """
    true, false = ConditionStatus.TRUE, ConditionStatus.FALSE
    conditions = list(status.conditions or [])
    if job.spec.suspend:
        message = (
            "The job is suspended (spec.suspend): every index's lease is suspended"
            + (f" ({len(active)} still being released)" if active else "")
            + "; no index starts until it is resumed, and writes under the released"
            " tokens are refused. Suspended attempts use no budget."
        )
        for type_, cstatus, reason, text in (
            (suspension.CONDITION, true, suspension.JOB_SUSPENDED, message),
            ("Ready", false, suspension.SUSPENDED, message),
            ("LeaseHeld", false, suspension.SUSPENDED, "The job is suspended: no index is held."),
        ):
            conditions = set_condition(
                conditions, type_, cstatus, reason, text, now=now, generation=generation
            )
        return status.model_copy(update={"phase": Phase.SUSPENDED, "conditions": conditions})
    if not suspension.is_suspended(status):
        return status
    message = "The job was resumed: each index's next attempt runs under a higher token."
    conditions = set_condition(
        conditions,
        suspension.CONDITION,
        false,
        suspension.JOB_RESUMED,
        message,
        now=now,
        generation=generation,
    )
    return status.model_copy(update={"conditions": conditions})


def replace_action(plan: Plan, action: Action) -> Plan:
    """``plan`` with another action (and no pod deletions of its own)."""
    return Plan(
        action,
        plan.status,
        pod_name=plan.pod_name,
        token=plan.token,
        requeue_after_seconds=plan.requeue_after_seconds,
    )


def _backoff_events(plan: Plan) -> list[JobEvent]:
    """The BackingOff Event of an index whose retry waits (once per failure seen)."""
    ready = next((c for c in plan.status.conditions or [] if c.type == "Ready"), None)
    if ready is None or ready.reason != reconcile.BACKING_OFF:
        return []
    return [JobEvent("Warning", reconcile.BACKING_OFF, ready.message)]


def _end(
    job: LeasedJob,
    done: set[int],
    failed: set[int],
    failures: int,
    total: int,
    elapsed_seconds: float,
) -> tuple[Outcome, str, str] | None:
    """Whether the job is over: ``(outcome, reason, message)``, else ``None``."""
    spec = job.spec
    if spec.cancel:
        return (
            Outcome.FAILED,
            reconcile.CANCELLED,
            (
                "The job was cancelled (spec.cancel); the leases of its unfinished indexes were"
                " stopped: writes under their tokens are refused from now on."
            ),
        )
    deadline = spec.active_deadline_seconds
    if deadline is not None and elapsed_seconds >= deadline:
        return (
            Outcome.FAILED,
            "DeadlineExceeded",
            (
                f"The job ran longer than activeDeadlineSeconds={deadline}; the leases of its"
                " unfinished indexes were taken back without a completion."
            ),
        )
    ranges = index_sets.compress(failed)
    if spec.backoff_limit_per_index is not None:
        limit = spec.max_failed_indexes
        if limit is not None and len(failed) > limit:
            return (
                Outcome.FAILED,
                "MaxFailedIndexesExceeded",
                (
                    f"{len(failed)} indexes failed ({ranges}), more than maxFailedIndexes={limit};"
                    " the unfinished indexes were stopped."
                ),
            )
    elif failed or failures > spec.backoff_limit:
        reason = "BackoffLimitExceeded" if failures > spec.backoff_limit else "IndexFailed"
        return (
            Outcome.FAILED,
            reason,
            (
                f"{failures} worker failures over all indexes (backoffLimit={spec.backoff_limit})"
                + (f"; failed indexes: {ranges}" if failed else "")
                + "; the unfinished indexes were stopped."
            ),
        )
    if len(done) + len(failed) < total:
        return None
    if failed:
        return (
            Outcome.FAILED,
            "FailedIndexes",
            (f"Every index ran; {len(failed)} of {total} failed ({ranges})."),
        )
    return Outcome.SUCCEEDED, "Completed", f"All {total} indexes succeeded."


def _finish(
    status: LeasedJobStatus,
    outcome: Outcome,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None,
) -> LeasedJobStatus:
    """``status`` of a finished job, with its conditions (as the single-lease job's)."""
    succeeded = outcome == Outcome.SUCCEEDED
    true, false = ConditionStatus.TRUE, ConditionStatus.FALSE
    conditions = list(status.conditions or [])
    for type_, cstatus, why, text in (
        ("Complete", true if succeeded else false, reason, message),
        ("Failed", false if succeeded else true, reason, message),
        ("Ready", true if succeeded else false, reason, message),
        ("LeaseHeld", false, "Finished", "The job finished; no index lease is held."),
    ):
        conditions = set_condition(
            conditions, type_, cstatus, why, text, now=now, generation=generation
        )
    return status.model_copy(
        update={
            "phase": Phase.SUCCEEDED if succeeded else Phase.FAILED,
            "conditions": conditions,
            "observed_generation": generation,
            "completion_time": status.completion_time or now,
        }
    )
