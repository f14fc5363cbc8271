"""Pure decisions for a LeasedJob with several completions: one lease per index.

Why this module exists: an Indexed job (``spec.completionMode: Indexed``, or
``spec.completions`` above 1) runs each index under a JobLease of its own
(``<job>.<index>``), its own fencing domain with its own attempts, failures
and take-overs. Each index is planned by the single-lease planner
(:func:`leasehold.controller.plan.single.plan`) as a *sub-job*: the job's spec
with the index's failure budget, named after the index's hostname, its status
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
from typing import Final

from leasehold.controller.plan import replacement, suspension, terminal
from leasehold.controller.plan import single as reconcile
from leasehold.controller.plan.conditions import set_condition
from leasehold.controller.plan.failure_policy import POD_FAILURE_POLICY
from leasehold.controller.plan.single import Action, JobEvent, Plan, PodFacts
from leasehold.controller.plan.success_policy import SUCCESS_POLICY, matched_rule
from leasehold.lease import indexes as index_sets
from leasehold.lease.api import (
    MAX_COMPLETIONS,
    CompletionMode,
    ConditionStatus,
    LeasedJob,
    LeasedJobStatus,
    Phase,
)
from leasehold.lease.indexes import index_hostname, index_lease_name
from leasehold.lease.protocol import LeaseRecord, Outcome

SCALED: Final = "Scaled"
"""Event reason: ``spec.completions`` changed (an elastic Indexed job scaled)."""
SLOTS_STOPPED: Final = "SlotsStopped"
"""The Event reason when a work queue stops its slots not held after its first success."""


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
        ``True`` for ``completionMode: Indexed``, ``completions`` above 1, or
        the work-queue form (:func:`is_work_queue`).
    """
    spec = job.spec
    return (
        spec.completion_mode == CompletionMode.INDEXED
        or (spec.completions or 1) > 1
        or is_work_queue(job)
    )


def is_work_queue(job: LeasedJob) -> bool:
    """Whether the job is batch/v1's work queue: ``completions`` unset, ``parallelism`` above 1.

    Each of its ``parallelism`` worker slots is an index lease (``<job>.<slot>``,
    its own fencing domain); the first slot that succeeds ends the job once
    no slot is held (pkg/controller/job/job_controller.go: ``Completions ==
    nil``, ``wantActive``, ``complete = succeeded > 0 && active == 0``). The
    form is fixed at creation (the CRD refuses a ``parallelism`` edit that
    would move a job between one lease and slots). A job that an earlier
    operator already ran on one lease (``status.leaseName`` set) stays on it.

    Args:
        job: the LeasedJob.

    Returns:
        ``True`` for a NonIndexed job without ``completions`` whose
        ``parallelism`` is above 1 and that holds no single lease.
    """
    spec = job.spec
    return (
        spec.completions is None
        and spec.completion_mode == CompletionMode.NON_INDEXED
        and (spec.parallelism or 1) > 1
        and (job.status is None or job.status.lease_name is None)
    )


def indexes(job: LeasedJob, leases: Mapping[int, LeaseRecord]) -> range:
    """The indexes the job plans: ``0..completions-1``, or a work queue's slots.

    A work queue has ``parallelism`` slots, and keeps planning the slots a
    higher ``parallelism`` made before it was lowered (their held leases run
    on; the others claim only into a free slot), never more than
    ``parallelism`` can be (a lease made by hand under a higher slot's name
    cannot make the planner walk further).

    Args:
        job: the LeasedJob.
        leases: the index leases that exist, by index.

    Returns:
        The range of indexes to plan, lowest first.
    """
    if is_work_queue(job):
        return range(min(max(parallelism(job), max(leases, default=-1) + 1), MAX_COMPLETIONS))
    return range(completions(job))


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

    Named after the index's hostname (so its pods are ``<job>-<index>-<token>``),
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
            "name": index_hostname(str(meta.get("name", "")), index),
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


def wants_pod_states(job: LeasedJob, lease: LeaseRecord) -> bool:
    """Whether an index's next claim may wait for its earlier pods (``podReplacementPolicy``).

    With ``podReplacementPolicy: Failed`` an unheld index whose attempt ended
    (above the base token, without a success) claims only once its earlier
    pods are terminal: their states are read from the pod watch's memory (no
    list) when :func:`wants_pod_facts` does not list them anyway.

    Args:
        job: the LeasedJob.
        lease: the index's lease record.

    Returns:
        ``True`` when the index's pods should be recalled for this reconcile.
    """
    if not replacement.waits_for_terminal(job) or lease.holder_identity is not None:
        return False
    done = lease.completion
    if done is not None and done.outcome != Outcome.FAILED:
        return False
    return lease.fencing_token > lease.base_fencing_token


def _state(plan: Plan, lease: LeaseRecord | None, job_uid: str | None) -> IndexState:
    phase = plan.status.phase
    if phase == Phase.SUCCEEDED:
        return IndexState.SUCCEEDED
    if phase == Phase.FAILED:
        return IndexState.FAILED
    if lease is not None and lease.holder_identity is not None and lease.job_uid == job_uid:
        return IndexState.ACTIVE
    return IndexState.PENDING


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

    In order: every index with a lease is planned (:func:`_survey`); the
    job's counts are written; if the job is over (:func:`_end`) the
    unfinished indexes are stopped (:func:`_stop_unfinished`), else the
    indexes to act on are picked (:func:`_steps`) and the job's conditions
    say how far it got (:func:`_progress`).

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
    if status.phase in (Phase.SUCCEEDED, Phase.FAILED) or terminal.decided(status):
        # Decided: its unfinished leases were stopped then; a stop that lost a
        # race with a renewal (409) is made again here, never dropped.
        return IndexedPlan(status, _late_stops(job, leases, now=now))
    created = job.metadata.get("creationTimestamp")
    if status.start_time is None:
        status.start_time = (
            datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else now
        )
    known_done = index_sets.parse(status.completed_indexes)
    known_failed = index_sets.parse(status.failed_indexes)

    survey = _survey(
        job, leases, known_done, now=now, reasons=reasons, backoffs=backoffs, pods=pods
    )
    events = _index_events(survey, known_failed, backoffs)

    scaled = _scaled_event(job, status, leases)
    if scaled is not None:
        events.insert(0, scaled)
    _count(job, status, survey)
    end = _end(job, survey, completions(job), elapsed_seconds)
    if end is not None:
        return _stop_unfinished(job, leases, status, survey, end, events, now=now, generation=gen)
    steps, requeue = _steps(job, leases, survey, status)
    steps = _scale_down_steps(job, leases, status) + steps
    events.extend(_wind_down_events(job, survey, steps))
    status = _progress(job, status, survey, steps, now=now, generation=gen)
    flip = suspension.transition(job.status, status)
    if flip is not None:
        events.insert(0, JobEvent(*flip))
    deadline = job.spec.active_deadline_seconds
    if deadline is not None:
        until = max(0.0, deadline - elapsed_seconds)
        requeue = until if requeue is None else min(requeue, until)
    return IndexedPlan(status, steps, events, requeue_after_seconds=requeue)


@dataclass(frozen=True)
class _Survey:
    """Every index's single-lease plan and where each index is (see :func:`_survey`).

    Attributes:
        plans: the plan of each index that has a lease, by index.
        states: where each index is: those with a lease, and those known
            done whose lease is gone.
        failures: worker failures over the leases of this job (not of an
            earlier job of the same name).
        attempts: claims over the leases of this job.
        done: the indexes that succeeded.
        failed: the indexes that failed for good.
        active: the indexes whose lease is held for this job.
        fail_job: per index, the message of a ``FailJob`` rule that matched its
            last attempt: the whole job fails (batch/v1's ``PodFailurePolicy``).
    """

    plans: dict[int, Plan]
    states: dict[int, IndexState]
    failures: int
    attempts: int
    done: set[int]
    failed: set[int]
    active: set[int]
    fail_job: dict[int, str] = field(default_factory=dict)


def _survey(
    job: LeasedJob,
    leases: Mapping[int, LeaseRecord],
    known_done: set[int],
    *,
    now: datetime,
    reasons: Mapping[int, str | None],
    backoffs: Mapping[int, datetime],
    pods: Mapping[int, Mapping[int, PodFacts]] | None,
) -> _Survey:
    """Plan every index that has a lease (:func:`plan_index`), and tell where each index is.

    An index without a lease is done if the job's status says so (its lease
    was deleted after it succeeded), else not started. Only the leases of
    this job count towards its failures and attempts: a lease left by an
    earlier job of the same name is being taken over.
    """
    uid = job.metadata.get("uid")
    plans: dict[int, Plan] = {}
    states: dict[int, IndexState] = {}
    failures = 0
    attempts = 0
    for index in indexes(job, leases):
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
    if is_work_queue(job) and IndexState.SUCCEEDED in states.values():
        _wound_down(leases, states)
    return _Survey(
        plans,
        states,
        failures,
        attempts,
        done={i for i, s in states.items() if s is IndexState.SUCCEEDED},
        failed={i for i, s in states.items() if s is IndexState.FAILED},
        active={i for i, s in states.items() if s is IndexState.ACTIVE},
        fail_job={
            i: message
            for i, p in plans.items()
            if states[i] is IndexState.FAILED
            and (message := _failed_by(p, POD_FAILURE_POLICY)) is not None
        },
    )


def _wound_down(leases: Mapping[int, LeaseRecord], states: dict[int, IndexState]) -> None:
    """A work queue after its first success: a slot stopped then is idle, not failed.

    Its lease was stopped (:func:`_wind_down`) so that no claim lands on it
    after the job's success; its single-lease plan reads the lowered cap as
    attempts used up, which is no failure of the job. ``states`` is updated
    in place (``FAILED`` to ``PENDING`` for such a slot).
    """
    for index, state in states.items():
        lease = leases.get(index)
        if (
            state is IndexState.FAILED
            and lease is not None
            and lease.completion is None
            and reconcile.stopped(lease)
        ):
            states[index] = IndexState.PENDING


def _failed_by(plan: Plan, reason: str) -> str | None:
    """The message of an index plan's ``Failed=True`` condition with ``reason``, else ``None``."""
    for c in plan.status.conditions or []:
        if c.type == "Failed" and c.status == ConditionStatus.TRUE and c.reason == reason:
            return c.message
    return None


def _count(job: LeasedJob, status: LeasedJobStatus, survey: _Survey) -> None:
    """Write the job's counts over its indexes into ``status`` (batch/v1 Job's fields).

    ``completedIndexes``/``failedIndexes`` are ranges, kept for
    ``completionMode: Indexed`` only. The single-lease fields (lease,
    holder, token, pod) are cleared: each index has a lease of its own.
    """
    indexed = job.spec.completion_mode == CompletionMode.INDEXED
    done, failed = survey.done, survey.failed
    status.completed_indexes = index_sets.compress(done) if indexed else None
    status.failed_indexes = index_sets.compress(failed) if indexed and failed else None
    status.succeeded = len(done)
    status.active = len(survey.active)
    status.failed = survey.failures
    status.attempts = survey.attempts
    status.completion_progress = None if is_work_queue(job) else f"{len(done)}/{completions(job)}"
    status.lease_name = None
    status.holder_identity = None
    status.fencing_token = None
    status.pod_name = None


def _index_events(
    survey: _Survey, known_failed: set[int], backoffs: Mapping[int, datetime]
) -> list[JobEvent]:
    """The indexes' Events worth telling on the job, each prefixed with its index.

    An index that failed for good since the status was written tells its
    plan's Events (why it failed); one whose retry starts to wait (its
    backoff not yet remembered) tells its BackingOff, once.
    """
    events: list[JobEvent] = []
    for index in sorted(survey.failed - known_failed):
        for event in survey.plans[index].events:
            events.append(JobEvent(event.type, event.reason, f"Index {index}: {event.message}"))
    for index, plan in sorted(survey.plans.items()):
        if index not in backoffs and plan.status.next_attempt_after is not None:
            events.extend(
                JobEvent(e.type, e.reason, f"Index {index}: {e.message}")
                for e in _backoff_events(plan)
            )
    return events


def _stop_unfinished(
    job: LeasedJob,
    leases: Mapping[int, LeaseRecord],
    status: LeasedJobStatus,
    survey: _Survey,
    end: tuple[Outcome, str, str],
    events: list[JobEvent],
    *,
    now: datetime,
    generation: int | None,
) -> IndexedPlan:
    """The plan of a job that is over (``end``): finish it and stop its unfinished indexes.

    An index's lease is stopped only if it is this job's, unfinished, not
    stopped already, and carries no completion (one that landed first
    stands). A push job's pods that are left are deleted.
    """
    outcome, reason, message = end
    uid = job.metadata.get("uid")
    name = str(job.metadata.get("name", ""))
    status = _finish(status, outcome, reason, message, now=now, generation=generation)
    status.active = 0
    plans, states = survey.plans, survey.states
    stops = [
        IndexStep(i, index_lease_name(name, i), replace_action(plans[i], Action.STOP))
        for i in sorted(plans)
        if states[i] not in (IndexState.SUCCEEDED, IndexState.FAILED)
        and not reconcile.stopped(leases[i])
        and leases[i].completion is None
        and leases[i].job_uid == uid
    ]
    planned = indexes(job, leases)  # a scale-down's removed leases are beyond it
    stops += [s for s in _late_stops(job, leases, now=now) if s.index not in planned]
    ended = JobEvent("Normal" if outcome == Outcome.SUCCEEDED else "Warning", reason, message)
    return IndexedPlan(status, stops, [*events, ended], delete_pods=job.spec.template is not None)


def _late_stops(
    job: LeasedJob, leases: Mapping[int, LeaseRecord], *, now: datetime
) -> list[IndexStep]:
    """Stops still owed by a decided job: its leases without a completion that can still be claimed.

    The decision's stops (:func:`_stop_unfinished`) are conditional writes;
    one refused because the lease moved (a renewal) is owed until it lands.

    Args:
        job: the LeasedJob, decided or finished.
        leases: its index leases, by index.
        now: the current time (the steps' status stamps only).

    Returns:
        A ``STOP`` step per such lease of this job, lowest index first.
    """
    uid = job.metadata.get("uid")
    name = str(job.metadata.get("name", ""))
    status = job.status or LeasedJobStatus()
    return [
        IndexStep(i, index_lease_name(name, i), Plan(Action.STOP, status))
        for i, lease in sorted(leases.items())
        if reconcile.owes_stop(lease) and lease.job_uid == uid
    ]


def removed_indexes(job: LeasedJob, leases: Mapping[int, LeaseRecord]) -> list[int]:
    """The indexes a scale-down removed whose lease could still be claimed or renewed.

    batch/v1's elastic Indexed Job (pkg/controller/job/job_controller.go,
    indexed_job_utils.go): once ``spec.completions`` is lowered, the pods of
    the indexes at or above it are deleted and not counted. Here each such
    index's lease of this job (``spec.jobUID``) that has no completion and is
    neither suspended nor stopped is suspended at the store before its pod
    is deleted (:func:`_scale_down_steps`); a completion that landed first
    stands (a Succeeded index counts again if the job scales back up).

    Args:
        job: the LeasedJob.
        leases: the lease record of each index that has one, by index.

    Returns:
        Those indexes, lowest first (none for a work queue: it has no
        ``completions``).
    """
    if is_work_queue(job):
        return []  # no completions to scale: a lowered parallelism stops no held slot
    uid = job.metadata.get("uid")
    top = completions(job)
    return [
        i
        for i, lease in sorted(leases.items())
        if i >= top
        and lease.job_uid == uid
        and lease.completion is None
        and not lease.suspended
        and not reconcile.stopped(lease)
    ]


def _scale_down_steps(
    job: LeasedJob, leases: Mapping[int, LeaseRecord], status: LeasedJobStatus
) -> list[IndexStep]:
    """A ``SUSPEND`` step for every index a scale-down removed (:func:`removed_indexes`).

    Why a suspension and not a stop for good (``LeaseStore.stop`` lowers the
    cap to the token): the index may come back (completions raised again).
    The suspension is the store's stop *until resumed*: one conditional
    write makes the lease unheld (the removed worker's renewals and
    completion are refused from then on), refuses every claim while it
    lasts, and raises the cap by one when it ended a held attempt, so the
    attempt uses no budget (batch/v1 does not count the removed pods). A
    scale-up resumes it as a job's resume does: only once the removed
    worker's lease window has passed, then a claim above its token.
    """
    name = str(job.metadata.get("name", ""))
    return [
        IndexStep(i, index_lease_name(name, i), Plan(Action.SUSPEND, status))
        for i in removed_indexes(job, leases)
    ]


def _scaled_event(
    job: LeasedJob, status: LeasedJobStatus, leases: Mapping[int, LeaseRecord]
) -> JobEvent | None:
    """The ``Scaled`` Event when ``spec.completions`` differs from the status written last.

    The completions last planned are read from ``status.completionProgress``
    (``"<succeeded>/<completions>"``, written at every reconcile); a job
    never planned tells nothing.

    Args:
        job: the LeasedJob.
        status: its status as read (before this reconcile's counts).
        leases: its index leases, by index.

    Returns:
        The Event naming the indexes stopped (scale-down) or added (scale-up).
    """
    progress = status.completion_progress or ""
    before_text = progress.partition("/")[2]
    # Written by this operator, but /status is open to others: only ASCII digits
    # within the completions' bound are a number of completions (never "²", never
    # a range of billions to walk).
    if not (before_text.isascii() and before_text.isdigit()) or len(before_text) > 6:
        return None
    before, now_total = int(before_text), completions(job)
    if before > MAX_COMPLETIONS:
        return None
    if before == now_total:
        return None
    if now_total > before:
        added = index_sets.compress(set(range(before, now_total)))
        return JobEvent(
            "Normal",
            SCALED,
            f"Scaled up from completions={before} to {now_total}: indexes {added} start within"
            f" parallelism={parallelism(job)}; an index stopped by an earlier scale-down runs"
            " again under a token above its old one.",
        )
    stopped = removed_indexes(job, leases)
    return JobEvent(
        "Normal",
        SCALED,
        f"Scaled down from completions={before} to {now_total}: indexes"
        f" {index_sets.compress(set(range(now_total, before)))} are no longer counted;"
        + (
            f" the leases of indexes {index_sets.compress(set(stopped))} were stopped (suspended"
            " at the store), so their workers' renewals and completions are refused, and"
            " their pods deleted."
            if stopped
            else " none of them had a lease to stop."
        ),
    )


def _steps(
    job: LeasedJob,
    leases: Mapping[int, LeaseRecord],
    survey: _Survey,
    status: LeasedJobStatus,
) -> tuple[list[IndexStep], float | None]:
    """The indexes to act on while the job runs on, and the soonest requeue their plans ask.

    ``spec.parallelism`` is the number of slots. Push mode: an index held
    takes one; an index whose plan would claim (a claim, a retry, a
    take-over, a resume, an excuse) needs a free one, else it waits. Pull
    mode: a pool claims, so every unfinished lease that exists takes one.
    An index without a lease starts (``CREATE_LEASE``, carrying ``status``)
    only into a free slot, and never while the job is suspended. A finished
    index is acted on only to stop its lease. A plan that only reports
    (``NONE``) is kept when it has a backoff to remember, or a held push
    lease (to learn when its pod is bound).
    """
    if is_work_queue(job) and survey.done:
        return _wind_down(job, leases, survey)
    pull = job.spec.template is None
    name = str(job.metadata.get("name", ""))
    plans, states = survey.plans, survey.states
    steps: list[IndexStep] = []
    requeue: float | None = None
    open_slots = parallelism(job) - len(survey.active)
    if pull:  # a pool claims: every unfinished lease that exists is open for it
        open_slots = parallelism(job) - sum(
            1 for i in plans if states[i] in (IndexState.ACTIVE, IndexState.PENDING)
        )
    for index in indexes(job, leases):
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
            if plan.action is Action.STOP and not reconcile.stopped(leases[index]):
                steps.append(IndexStep(index, index_lease_name(name, index), plan))
            continue
        starts = not pull and plan.action in (
            Action.CLAIM_AND_START,
            Action.RETRY,
            Action.TAKE_OVER_LEASE,
            Action.RESUME,  # a resumed index is claimed at once: it needs a slot
            Action.EXCUSE,  # so is an evicted one
            Action.WAIT_FOR_PODS,  # its earlier pod is still active (batch/v1 counts it)
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
    return steps, requeue


def _wind_down(
    job: LeasedJob, leases: Mapping[int, LeaseRecord], survey: _Survey
) -> tuple[list[IndexStep], float | None]:
    """The steps of a work queue after its first success: no attempt starts anywhere.

    batch/v1 creates no pod once one succeeded and lets the running ones
    finish (``wantActive = active``, pkg/controller/job/job_controller.go).
    Here a held slot runs on (its plan is kept: binding its pod in push
    mode, a suspension, a stop it owes), but one whose pod was never created is
    stopped rather than started; every slot of this job that is not held
    and could still be claimed (no completion, not stopped) is stopped at
    the store, so neither the operator nor a pool can claim it any more. A
    slot with a Failed completion is not retried (that lease takes no
    claim until reopened).

    Returns:
        The steps, and the soonest requeue the held slots' plans ask.
    """
    uid = job.metadata.get("uid")
    name = str(job.metadata.get("name", ""))
    steps: list[IndexStep] = []
    requeue: float | None = None
    for index, plan in sorted(survey.plans.items()):
        lease = leases[index]
        if lease.job_uid != uid:
            continue
        if index in survey.active:
            if plan.action is Action.START_POD:
                plan = replace_action(plan, Action.STOP)
            if plan.action is not Action.NONE or job.spec.template is not None:  # bound yet?
                steps.append(IndexStep(index, index_lease_name(name, index), plan))
            if plan.requeue_after_seconds is not None:
                after = plan.requeue_after_seconds
                requeue = after if requeue is None else min(requeue, after)
        elif reconcile.owes_stop(lease):
            steps.append(
                IndexStep(index, index_lease_name(name, index), replace_action(plan, Action.STOP))
            )
    return steps, requeue


def _wind_down_events(job: LeasedJob, survey: _Survey, steps: list[IndexStep]) -> list[JobEvent]:
    """The Event of a work queue's stops after its first success (``SlotsStopped``).

    Told for each reconcile that stops slot leases (one, unless a stop lost
    a race with a claim or a renewal and is made again).

    Args:
        job: the LeasedJob.
        survey: where each slot is.
        steps: the steps planned.

    Returns:
        The Event, or none.
    """
    stops = sorted(s.index for s in steps if s.plan.action is Action.STOP)
    if not is_work_queue(job) or not survey.done or not stops:
        return []
    held = len(survey.active - set(stops))
    return [
        JobEvent(
            "Normal",
            SLOTS_STOPPED,
            f"Slot(s) {index_sets.compress(survey.done)} succeeded: no attempt starts any more"
            " (a work queue ends at its first success); stopping the slot leases not held"
            f" ({index_sets.compress(stops)}), so no claim lands on them; {held} held slot(s)"
            " run on.",
        )
    ]


def _progress(
    job: LeasedJob,
    status: LeasedJobStatus,
    survey: _Survey,
    steps: list[IndexStep],
    *,
    now: datetime,
    generation: int | None,
) -> LeasedJobStatus:
    """``status`` of a job that runs on: how far it got, then whether it is suspended.

    Running while an index is held or about to be claimed, else waiting;
    ``Ready``'s message counts the indexes held, succeeded and failed.
    ``status`` is updated in place (the ``CREATE_LEASE`` steps carry this
    same object), then given the job's ``Suspended`` condition
    (:func:`_suspension_status`).
    """
    active, done, failed = survey.active, survey.done, survey.failed
    running = bool(active) or any(s.plan.action is Action.CLAIM_AND_START for s in steps)
    true, false = ConditionStatus.TRUE, ConditionStatus.FALSE
    message = (
        f"{len(active)} of parallelism={parallelism(job)} indexes held; {len(done)} of"
        f" {completions(job)} succeeded" + (f", {len(failed)} failed" if failed else "") + "."
    )
    if is_work_queue(job):
        message = (
            f"{len(active)} of parallelism={parallelism(job)} worker slots held;"
            f" {len(done)} succeeded"
            + (f", {len(failed)} failed" if failed else "")
            + (": no slot starts again (a work queue ends at its first success)." if done else ".")
        )
    conditions = list(status.conditions or [])
    for type_, cstatus, reason in (
        ("Ready", true, "Running" if running else "Waiting"),
        ("LeaseHeld", true if active else false, "Claimed" if active else "Unheld"),
    ):
        conditions = set_condition(
            conditions, type_, cstatus, reason, message, now=now, generation=generation
        )
    status.conditions = conditions
    status.phase = Phase.RUNNING if running else Phase.PENDING
    status.observed_generation = generation
    return _suspension_status(job, status, active, now=now, generation=generation)


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
    job: LeasedJob, survey: _Survey, total: int, elapsed_seconds: float
) -> tuple[Outcome, str, str] | None:
    """Whether the job is over: ``(outcome, reason, message)``, else ``None``.

    In batch/v1's order: a cancel, the active deadline, a ``FailJob`` rule on
    any index (the whole job fails at once, reason ``PodFailurePolicy``), then
    the failure budgets over the indexes, then a ``successPolicy`` rule met
    (reason ``SuccessPolicy``, pkg/controller/job/job_controller.go checks it
    after the failures), then every index ran.
    """
    spec = job.spec
    done, failed, failures = survey.done, survey.failed, survey.failures
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
    if survey.fail_job:
        index, why = min(survey.fail_job.items())
        return (
            Outcome.FAILED,
            POD_FAILURE_POLICY,
            f"Index {index}: {why} The job failed; the unfinished indexes were stopped.",
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
    if is_work_queue(job):
        return _work_queue_end(survey)
    matched = matched_rule(job, done)
    if matched is not None:
        return (
            Outcome.SUCCEEDED,
            SUCCESS_POLICY,
            f"{matched}: {len(done)} of {total} indexes succeeded ({index_sets.compress(done)});"
            " the unfinished indexes were stopped.",
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


def _work_queue_end(survey: _Survey) -> tuple[Outcome, str, str] | None:
    """Whether a work queue succeeded: a slot succeeded and none is held any more.

    batch/v1's ``complete = succeeded > 0 && active == 0`` for ``completions``
    unset (pkg/controller/job/job_controller.go), judged after the failure
    checks of :func:`_end`, as there.

    Returns:
        ``(SUCCEEDED, "Completed", message)``, else ``None``.
    """
    done = survey.done
    if not done or survey.active:
        return None
    return (
        Outcome.SUCCEEDED,
        "Completed",
        f"{len(done)} worker slot(s) succeeded ({index_sets.compress(done)}) and no slot is"
        " held any more: a work queue (completions unset) ends at its first success once its"
        " running slots finished; the slots not held then were stopped.",
    )


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
