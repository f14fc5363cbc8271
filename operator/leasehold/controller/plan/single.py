"""Pure decisions for one LeasedJob: what to do next, and the objects to create.

Why this module exists: the operator's logic is a function of plain inputs
(the job, its lease, whether the current holder's pod was created, the time)
returning one :class:`Plan`. The service layer (:mod:`leasehold.controller.act.jobs`)
performs the plan; Kopf handlers (:mod:`leasehold.controller.handlers`) only trigger
it. Pod building is a pure ``build_pod`` (as dask-kubernetes' ``build_*_spec``)
so its output is golden-file tested.

No Kubernetes client or Kopf import here: inputs are pydantic models and the
protocol's :class:`~leasehold.lease.protocol.LeaseRecord`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Final, NamedTuple

from leasehold.controller.plan import failure_policy, replacement, retention, suspension, terminal
from leasehold.controller.plan.conditions import set_condition
from leasehold.controller.plan.failure_policy import (
    FAIL_INDEX,
    POD_FAILURE_POLICY,
    PodFacts,
    Verdict,
)
from leasehold.controller.plan.pod import lease_name, pod_name
from leasehold.lease import api, protocol
from leasehold.lease.api import (
    AttemptReason,
    AttemptRecord,
    ConditionStatus,
    FailureAction,
    LeasedJob,
    LeasedJobStatus,
    Phase,
)
from leasehold.lease.protocol import Completion, LeaseRecord, Outcome

STARTUP_DEADLINE_EXCEEDED: Final = "StartupDeadlineExceeded"
"""Reason of an attempt reclaimed before it started (the expiry watch's word for it)."""
BACKING_OFF: Final = "BackingOff"
"""Reason while a failed attempt's retry waits for its backoff delay."""
CANCELLED: Final = "Cancelled"
"""Reason of a job stopped for good by ``spec.cancel``."""


__all__ = ["PodFacts"]  # re-exported: the service builds them


class Action(enum.StrEnum):
    """What the service should do for a job, after writing its status."""

    NONE = "None"
    """Nothing but the status (waiting: for a renewal, an expiry, a worker)."""
    CREATE_LEASE = "CreateLease"
    """The job has no JobLease yet: create it (unheld, token 0)."""
    TAKE_OVER_LEASE = "TakeOverLease"
    """The JobLease serves an earlier incarnation of the job name (deleted and
    created again): hand it to this one at its current token."""
    CLAIM_AND_START = "ClaimAndStart"
    """Push mode, lease unheld: claim it for the next pod, then create the pod."""
    START_POD = "StartPod"
    """The lease is held for a pod the operator never created (it crashed
    between the claim and the pod): create it now."""
    RETRY = "Retry"
    """The worker failed, ``backoffLimit`` allows another try and the backoff
    delay is over: reopen the lease (its Failed completion kept as
    ``lastFailure``), then plan again on it (a claim)."""
    STOP = "Stop"
    """Take the lease back for good (deadline passed, attempts used up, cancelled)."""
    SUSPEND = "Suspend"
    """``spec.suspend``: release the lease and keep it unclaimable (one write,
    :meth:`~leasehold.lease.store.LeaseStore.suspend`), then delete the pods."""
    RESUME = "Resume"
    """``spec.suspend`` is false again: make the lease claimable, then plan
    again on it (a claim)."""
    WAIT_FOR_PODS = "WaitForPods"
    """``podReplacementPolicy: Failed``: an earlier attempt's pod is not terminal
    yet; delete it (``delete_pods_below_token``, when one is not being deleted)
    and claim nothing until it is (its pod events bring the next reconcile)."""
    EXCUSE = "Excuse"
    """The ended attempt draws on no budget (a disruption, a failure a rule
    ignores): excuse it on the lease (reopening its Failed completion, if
    any), then plan again on it (a claim)."""


class JobEvent(NamedTuple):
    """A Kubernetes Event to record on the job."""

    type: str
    """``Normal`` or ``Warning``."""
    reason: str
    """CamelCase, e.g. ``DeadlineExceeded``."""
    message: str


@dataclass(frozen=True)
class Plan:
    """The decision for one job at one moment.

    Attributes:
        action: what to do.
        status: the status to write (only when it differs from the current).
        events: Events to record on the job.
        pod_name: for ``CLAIM_AND_START``/``START_POD``, the pod (= holder).
        token: for ``CLAIM_AND_START``/``START_POD``, the fencing token the
            attempt runs under (a claim that gets another token was raced).
        delete_pods_below_token: delete this job's pods whose token is lower
            (stale attempts); ``0`` for none.
        requeue_after_seconds: reconcile the job again after this many
            seconds even if nothing changes (a deadline, a backoff).
        keep_ended_pods: spare the pods below ``delete_pods_below_token``
            that have ended (``spec.podRetention: All``).
        keep_pod_tokens: spare the pods of these tokens too (``All``: their
            attempts completed).
    """

    action: Action
    status: LeasedJobStatus
    events: list[JobEvent] = field(default_factory=list)
    pod_name: str | None = None
    token: int | None = None
    delete_pods_below_token: int = 0
    requeue_after_seconds: float | None = None
    keep_ended_pods: bool = False
    keep_pod_tokens: frozenset[int] = frozenset()


@dataclass(frozen=True)
class _Ctx:
    job: LeasedJob
    now: datetime
    generation: int | None
    pods: Mapping[int, PodFacts] = field(default_factory=dict)

    def status(self) -> LeasedJobStatus:
        return (self.job.status or LeasedJobStatus()).model_copy(deep=True)


def _with(
    ctx: _Ctx,
    status: LeasedJobStatus,
    phase: Phase,
    *conds: tuple[str, ConditionStatus, str, str],
) -> LeasedJobStatus:
    conditions = list(status.conditions or [])
    for type_, cstatus, reason, message in conds:
        conditions = set_condition(
            conditions, type_, cstatus, reason, message, now=ctx.now, generation=ctx.generation
        )
    return status.model_copy(
        update={
            "phase": phase,
            "conditions": conditions,
            "observed_generation": ctx.generation,
        }
    )


def _finished(
    ctx: _Ctx, status: LeasedJobStatus, outcome: Outcome, reason: str, message: str
) -> LeasedJobStatus:
    succeeded = outcome == Outcome.SUCCEEDED
    phase = Phase.SUCCEEDED if succeeded else Phase.FAILED
    true, false = ConditionStatus.TRUE, ConditionStatus.FALSE
    out = _with(
        ctx,
        status,
        phase,
        ("Complete", true if succeeded else false, reason, message),
        ("Failed", false if succeeded else true, reason, message),
        ("Ready", true if succeeded else false, reason, message),
        ("LeaseHeld", false, "Finished", "The job finished; the lease is no longer held."),
    )
    return out.model_copy(
        update={"completion_time": status.completion_time or ctx.now, "holder_identity": None}
    )


def failed_status(
    job: LeasedJob, status: LeasedJobStatus, reason: str, message: str, *, now: datetime
) -> LeasedJobStatus:
    """The status of a job that failed for ``reason`` (outside :func:`plan`).

    Args:
        job: the LeasedJob.
        status: its status so far.
        reason: CamelCase reason, e.g. ``PodCreateFailed``.
        message: what went wrong, for people.
        now: the current time.

    Returns:
        The status with phase ``Failed`` and the conditions set.
    """
    generation = job.metadata.get("generation")
    ctx = _Ctx(job, now, int(generation) if generation is not None else None)
    return _finished(ctx, status, Outcome.FAILED, reason, message)


def wants_pod_facts(job: LeasedJob, lease: LeaseRecord | None) -> bool:
    """Whether :func:`plan` would use the job's pods (the service then lists them).

    Only while the latest attempt's history lacks what the pod tells (its UID
    and node): one list per reconcile until the pod is bound, none after.

    Args:
        job: the LeasedJob.
        lease: its lease record, if any.

    Returns:
        ``True`` when the pods should be read for this reconcile.
    """
    status = job.status or LeasedJobStatus()
    if job.spec.template is None or lease is None:
        return False
    if status.phase in (Phase.SUCCEEDED, Phase.FAILED) or terminal.decided(status):
        return False  # decided: planned no further (its wait for the pods counts them)
    last = status.attempt_history[-1] if status.attempt_history else None
    if lease.holder_identity is None:
        # An attempt ended (or none ran): its pod tells how (failure rules).
        if pod_facts_judge_an_end(lease):
            return True
        # It succeeded before any reconcile saw its pod bound (a short command
        # on a busy operator): its pod still tells the node.
        return (
            last is not None
            and last.fencing_token == lease.fencing_token
            and (last.node_name is None)
        )
    return last is None or last.fencing_token != lease.fencing_token or last.node_name is None


def pod_facts_judge_an_end(lease: LeaseRecord) -> bool:
    """Whether the pods must be listed to judge how the lease's last attempt ended.

    An unheld lease whose attempt ended without a completion, or with a
    Failed one, is judged by its pod (failure rules, disruptions): the pods
    are listed, so a pod already deleted is still told by its last state.
    Otherwise the pod watch's memory of the pods is enough (it only fills in
    the attempt's pod UID and node).

    Args:
        lease: the job's lease record.

    Returns:
        ``True`` when the pods are to be listed rather than recalled.
    """
    if lease.holder_identity is not None:
        return False
    done = lease.completion
    ended = done is None or done.outcome == Outcome.FAILED
    return ended and lease.fencing_token > lease.base_fencing_token


def _end_attempt(
    history: list[AttemptRecord],
    reason: AttemptReason,
    now: datetime,
    exit_code: int | None = None,
) -> list[AttemptRecord]:
    """``history`` with its latest attempt ended for ``reason`` (if it is still open)."""
    if not history or history[-1].reason is not None:
        return history
    last = history[-1]
    ended = last.model_copy(
        update={
            "reason": reason,
            "end_time": now,
            "exit_code": exit_code if exit_code is not None else last.exit_code,
        }
    )
    return [*history[:-1], ended]


def _ended_as(
    token: int,
    lease: LeaseRecord,
    pods: dict[int, PodFacts],
    last_reclaim_reason: str | None,
) -> tuple[AttemptReason, int | None] | None:
    """How the attempt under ``token`` ended, as the lease shows it: (reason, exit code).

    With the completion's outcome when one was recorded under its token;
    else, once the lease moved past it or is unheld, as reclaimed (or never
    started, suspended, evicted). ``None`` while it runs.
    """
    done = lease.completion
    if done is None and lease.last_failure is not None:
        done = lease.last_failure  # reopened to retry; the failure stays on record
    facts = pods.get(token)
    disrupted = facts is not None and facts.disrupted
    if done is not None and done.fencing_token == token:
        outcome = (
            AttemptReason.SUCCEEDED
            if done.outcome == Outcome.SUCCEEDED
            else AttemptReason.EVICTED
            if disrupted
            else AttemptReason.FAILED
        )
        return outcome, done.exit_code
    if token < lease.fencing_token or lease.holder_identity is None:
        current = token == lease.fencing_token
        why = (
            AttemptReason.STARTUP_DEADLINE_EXCEEDED
            if current and last_reclaim_reason == STARTUP_DEADLINE_EXCEEDED
            else AttemptReason.SUSPENDED
            if lease.suspended and current
            else AttemptReason.EVICTED
            if disrupted
            else AttemptReason.RECLAIMED
        )
        return why, None
    return None


def _track_attempts(
    status: LeasedJobStatus,
    lease: LeaseRecord,
    pods: dict[int, PodFacts],
    now: datetime,
    last_reclaim_reason: str | None,
    started_token: int | None = None,
    started_pod: str | None = None,
) -> LeasedJobStatus:
    """Bring ``status.attemptHistory`` up to date with the lease (and the pods read).

    An open attempt whose lease moved on is ended: with the completion's
    outcome when one was recorded under its token, else as reclaimed (or
    never started). A claim not yet in the history opens a new attempt. A
    claim that this job started (``started_token``: the token its stored
    status recorded when the attempt's pod was made, with that token's pod
    name ``started_pod``: a token claimed and burnt for a pod name someone
    else took, then only observed, has another pod's name) and that ended before
    any plan saw it held (a reclaim, a completion or a suspend that the
    job's next reconcile found first: a busy operator) is recorded opened
    and ended at once, so the history and ``lastAttemptReason`` never miss
    an attempt. Only the last :data:`~leasehold.lease.api.MAX_ATTEMPT_HISTORY`
    are kept.
    """
    history = list(status.attempt_history or [])
    token = lease.fencing_token
    last = history[-1] if history else None
    if last is not None and last.reason is None:
        ended = _ended_as(last.fencing_token, lease, pods, last_reclaim_reason)
        if ended is not None:
            history = _end_attempt(history, ended[0], now, ended[1])
    new_token = last is None or last.fencing_token < token
    if lease.holder_identity is not None and new_token:
        history.append(
            AttemptRecord(
                fencing_token=token,
                pod_name=lease.holder_identity,
                start_time=lease.acquire_time or now,
            )
        )
    recorded: set[int] = set()
    if (
        new_token
        and token > lease.base_fencing_token
        and lease.holder_identity is None
        and started_token == token
        and started_pod is not None
        and status.pod_name == started_pod
    ):
        ended = _ended_as(token, lease, pods, last_reclaim_reason)
        if ended is not None:
            opened = AttemptRecord(
                fencing_token=token,
                pod_name=status.pod_name,
                start_time=lease.acquire_time or now,
            )
            history = _end_attempt([*history, opened], ended[0], now, ended[1])
            recorded.add(token)
    # An exit code is the attempt's only if known by the time it ended (a pod
    # still running when reclaimed exits later, when it is deleted as stale).
    was_open = {a.fencing_token for a in status.attempt_history or [] if a.reason is None}
    was_open |= recorded  # ended unseen: its pod's exit code is the one it ended with
    filled = []
    for attempt in history:
        facts = pods.get(attempt.fencing_token)
        if facts is not None:
            code = attempt.exit_code
            if code is None and (attempt.reason is None or attempt.fencing_token in was_open):
                code = facts.exit_code
            attempt = attempt.model_copy(
                update={
                    "pod_uid": attempt.pod_uid or facts.uid,
                    "node_name": attempt.node_name or facts.node_name,
                    "exit_code": code,
                }
            )
        filled.append(attempt)
    return _with_history(status, filled)


def _with_history(status: LeasedJobStatus, history: list[AttemptRecord]) -> LeasedJobStatus:
    history = history[-api.MAX_ATTEMPT_HISTORY :]
    return status.model_copy(
        update={
            "attempt_history": history or None,
            "last_attempt_reason": history[-1].reason if history else None,
        }
    )


def attempt_limit(job: LeasedJob, lease: LeaseRecord) -> int:
    """How many claims the job may make: the lower of its spec and its lease's cap.

    Counted from the token at which this incarnation took the lease
    (``baseFencingToken``), like the attempts.
    The spec allows ``maxAttempts`` (the reclaim budget) plus ``backoffLimit``
    (worker failures retried), and one more for each suspension (which raised
    the lease's cap by one: a suspended attempt uses no budget).

    Attempts excused from every budget (``uncountedAttempts``: disruptions,
    ignored failures) add to it, as each raised the lease's cap by one.

    The lease's cap (``spec.maxFencingToken``) is what the API server enforces
    on claims; a spec that says more (an older CRD let ``maxAttempts`` be
    raised) must not leave the operator retrying a claim the server refuses.

    Args:
        job: the LeasedJob.
        lease: its lease record.

    Returns:
        The attempt limit (>= 1 for a valid job).
    """
    cap = lease.max_fencing_token
    own = job.spec.max_attempts + job.spec.backoff_limit + lease.suspensions
    own += lease.uncounted_attempts
    if cap is None:
        return own
    return min(own, cap - lease.base_fencing_token)


def plan(
    job: LeasedJob,
    lease: LeaseRecord | None,
    *,
    now: datetime,
    pod_created_for_holder: bool,
    elapsed_seconds: float = 0.0,
    last_reclaim_reason: str | None = None,
    pods: dict[int, PodFacts] | None = None,
) -> Plan:
    """Decide what to do next for one LeasedJob, and when to look at it again.

    See :func:`_plan` for the decision; this adds the deadline's timer: an
    unfinished job with ``activeDeadlineSeconds`` is reconciled again when
    its deadline comes, even if nothing else happens to it.

    Args:
        job: see :func:`_plan`.
        lease: see :func:`_plan`.
        now: see :func:`_plan`.
        pod_created_for_holder: see :func:`_plan`.
        elapsed_seconds: see :func:`_plan`.
        last_reclaim_reason: see :func:`_plan`.
        pods: see :func:`_plan`.

    Returns:
        The :class:`Plan`.
    """
    decided = _plan(
        job,
        lease,
        now=now,
        pod_created_for_holder=pod_created_for_holder,
        elapsed_seconds=elapsed_seconds,
        last_reclaim_reason=last_reclaim_reason,
        pods=pods or {},
    )
    flip = suspension.transition(job.status, decided.status)
    if flip is not None:
        decided = replace(decided, events=[JobEvent(*flip), *decided.events])
    unwrapped = exited_without_completion(job.status, decided.status)
    if unwrapped is not None:
        decided = replace(decided, events=[*decided.events, unwrapped])
    pods_gone = retention.pod_deletion(job, decided.status, decided.delete_pods_below_token)
    decided = replace(
        decided,
        delete_pods_below_token=pods_gone.below_token,
        keep_ended_pods=pods_gone.keep_ended,
        keep_pod_tokens=pods_gone.keep_tokens,
    )
    deadline = job.spec.active_deadline_seconds
    if (
        deadline is None
        or decided.status.phase in (Phase.SUCCEEDED, Phase.FAILED)
        or terminal.decided(decided.status)  # held in its phase while its pods end
    ):
        return decided
    until_deadline = max(0.0, deadline - elapsed_seconds)
    if decided.requeue_after_seconds is not None:  # a backoff: whichever comes first
        until_deadline = min(until_deadline, decided.requeue_after_seconds)
    return replace(decided, requeue_after_seconds=until_deadline)


def stopped(lease: LeaseRecord) -> bool:
    """Whether ``lease`` is stopped for good: unheld, its cap at its token (no claim takes it)."""
    cap = lease.max_fencing_token
    return lease.holder_identity is None and cap is not None and cap <= lease.fencing_token


def owes_stop(lease: LeaseRecord) -> bool:
    """Whether a decided job's ``lease`` still needs its stop: no completion, not stopped.

    Args:
        lease: the job's own lease record (``spec.jobUID`` is the job's).

    Returns:
        ``True`` when a claim or a renewal could still be accepted on it.
    """
    return lease.completion is None and not stopped(lease)


def exited_without_completion(
    before: LeasedJobStatus | None, after: LeasedJobStatus
) -> JobEvent | None:
    """A Warning when an attempt just ended reclaimed though its pod exited 0.

    The usual cause: the container's command was not run under ``leasehold
    run`` (nor completed through the SDK), so nothing renewed the lease or
    recorded the completion, and the attempt is counted as reclaimed.

    Args:
        before: the status as read (``None`` for a new job).
        after: the status planned.

    Returns:
        The Event (reason ``ExitedWithoutCompletion``), or ``None``.
    """
    was_open = {
        a.fencing_token
        for a in (before.attempt_history if before else None) or []
        if a.reason is None
    }
    for attempt in after.attempt_history or []:
        if (
            attempt.fencing_token in was_open
            and attempt.reason == AttemptReason.RECLAIMED
            and attempt.exit_code == 0
        ):
            return JobEvent(
                "Warning",
                "ExitedWithoutCompletion",
                f"Pod {attempt.pod_name} exited 0 but recorded no completion under fencing"
                f" token {attempt.fencing_token}, so its lease expired and the attempt counts"
                " as reclaimed. Run the container's command under `leasehold run -- <command>`"
                " (or complete through the worker SDK).",
            )
    return None


def _created(job: LeasedJob) -> datetime | None:
    """The job's ``metadata.creationTimestamp`` (the API server's clock), if set."""
    raw = job.metadata.get("creationTimestamp")
    if not raw:
        return None
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


def _plan(
    job: LeasedJob,
    lease: LeaseRecord | None,
    *,
    now: datetime,
    pod_created_for_holder: bool,
    elapsed_seconds: float = 0.0,
    last_reclaim_reason: str | None = None,
    pods: dict[int, PodFacts],
) -> Plan:
    """Decide what to do next for one LeasedJob.

    The checks run in a fixed order, which is the protocol: a finished job
    stays finished; a job without its lease (or on another incarnation's)
    gets one first; a completion that landed first stands, before a cancel,
    which comes before the deadline, which comes before a suspension; only
    then is a held lease watched, or an unheld one claimed (or the job given
    up). Each decision is a function of its own below.

    Args:
        job: the LeasedJob (spec and current status).
        lease: its lease record, or ``None`` if the JobLease does not exist.
        now: the current wall-clock time (status timestamps only, for people).
        pod_created_for_holder: whether the operator already created the pod
            of the lease's current holder (``status.podName == holder``).
        elapsed_seconds: how long the job has existed, measured without this
            process's wall clock (:class:`~leasehold.controller.engines.deadline.JobClocks`);
            judged against ``activeDeadlineSeconds``.
        last_reclaim_reason: why the lease's current token was taken back
            (``LeaseExpired``, ``StartupDeadlineExceeded``), if it was.
        pods: what was read of the job's pods, by fencing token (may be
            empty; see :func:`wants_pod_facts`), for the attempt history.

    Returns:
        The :class:`Plan`. Expiry is not decided here: the operator's
        :class:`~leasehold.controller.engines.expiry.ExpiryClock` does that and reclaims; this
        function then sees an unheld lease and starts the next attempt.
    """
    generation = job.metadata.get("generation")
    ctx = _Ctx(job, now, int(generation) if generation is not None else None, pods)
    status = ctx.status()
    name = str(job.metadata.get("name", ""))

    if status.phase in (Phase.SUCCEEDED, Phase.FAILED) or terminal.decided(status):
        # Decided: its lease was stopped or completed, unless the decision came
        # from another client's /status write, or its stop was lost: stop now.
        if lease is not None and lease.job_uid == job.metadata.get("uid") and owes_stop(lease):
            return Plan(Action.STOP, status, delete_pods_below_token=lease.fencing_token + 1)
        return Plan(Action.NONE, status)
    status.start_time = status.start_time or _created(job) or now
    status.lease_name = lease_name(name)

    if lease is None:
        return _no_lease(ctx, status)
    uid = job.metadata.get("uid")
    if uid is not None and lease.job_uid != uid:
        return _take_over(ctx, status, lease)

    seen, status = _observe(ctx, status, lease, pods, last_reclaim_reason)
    if lease.completion is not None:
        return _completed(ctx, status, seen, lease.completion)
    if job.spec.cancel:
        # A completion that landed first stands (above); else the lease is
        # stopped now, not when the attempt's pod happens to die.
        return _cancelled(ctx, status, seen)
    deadline = job.spec.active_deadline_seconds
    if deadline is not None and elapsed_seconds >= deadline:
        return _deadline_exceeded(ctx, status, seen, deadline)
    if job.spec.suspend or lease.suspended:
        return _suspension(ctx, status, lease, seen.stale)
    if lease.holder_identity is not None:
        return _held(ctx, status, seen, lease.holder_identity, pod_created_for_holder)
    # Unheld and not completed: released, reclaimed, reopened after a failure,
    # excused, or never claimed.
    return _unheld(ctx, status, seen)


@dataclass(frozen=True)
class _Seen:
    """What :func:`_observe` read off a lease of this incarnation, for the decisions after it.

    Attributes:
        lease: the job's lease record.
        attempts: the claims this incarnation made (from its base token).
        verdict: the failure rules' verdict on the latest attempt, if it ended undecided.
        excusable: the verdict excuses the attempt and the lease may excuse one more.
        failed_now: a Failed completion is on the lease and no rule excuses it.
        known_failed: ``status.failed`` as read (so a failure is told seen the first time).
        stale: the lease's token for a push job (its pods below it, or up to
            it, are stale), else 0.
        last_reclaim_reason: why the lease's current token was taken back, if it was.
    """

    lease: LeaseRecord
    attempts: int
    verdict: Verdict | None
    excusable: bool
    failed_now: bool
    known_failed: int | None
    stale: int
    last_reclaim_reason: str | None


def _no_lease(ctx: _Ctx, status: LeasedJobStatus) -> Plan:
    """The plan of a job whose JobLease does not exist yet: create it.

    A job cancelled before then fails at once, with no lease to stop.
    """
    if ctx.job.spec.cancel:
        message = "The job was cancelled (spec.cancel) before any attempt."
        status = _finished(ctx, status, Outcome.FAILED, CANCELLED, message)
        return Plan(Action.NONE, status, events=[JobEvent("Warning", CANCELLED, message)])
    status = _with(
        ctx,
        status,
        Phase.PENDING,
        ("Ready", ConditionStatus.FALSE, "CreatingLease", "Creating the JobLease."),
    )
    return Plan(Action.CREATE_LEASE, status)


def _take_over(ctx: _Ctx, status: LeasedJobStatus, lease: LeaseRecord) -> Plan:
    """The plan of a job whose JobLease serves another incarnation: take it over.

    Either a lease made ahead for this job (a LeasedCronJob's run, no job
    UID yet) or one left by an earlier job of the same name; it is taken at
    its current token, so tokens never repeat.
    """
    if lease.job_uid is None:
        # Made ahead for this job (a LeasedCronJob's run): no earlier job.
        message = (
            f"Taking over the JobLease prepared for this job at fencing token"
            f" {lease.fencing_token} (the start of its reserved token range)."
        )
    else:
        name = str(ctx.job.metadata.get("name", ""))
        message = (
            f"The JobLease served an earlier job named {name}; taking it over at fencing"
            f" token {lease.fencing_token}, so tokens never repeat."
        )
    status = _with(
        ctx, status, Phase.PENDING, ("Ready", ConditionStatus.FALSE, "TakingOverLease", message)
    )
    return Plan(
        Action.TAKE_OVER_LEASE, status, events=[JobEvent("Normal", "TakingOverLease", message)]
    )


def _observe(
    ctx: _Ctx,
    status: LeasedJobStatus,
    lease: LeaseRecord,
    pods: dict[int, PodFacts],
    last_reclaim_reason: str | None,
) -> tuple[_Seen, LeasedJobStatus]:
    """Read the lease into the status, before any decision on it.

    Every decision after this one reports the lease as it is: its token,
    attempts, holder and failures, the attempt history brought up to date
    (:func:`_track_attempts`), and ``Suspended`` turned False once the job
    is no longer suspended. The failure rules judge the latest attempt here,
    once, for the decisions that follow.

    Returns:
        What was seen, and the status so far.
    """
    job = ctx.job
    attempts = lease.fencing_token - lease.base_fencing_token
    started_token = status.fencing_token  # as stored: the last attempt this job started
    status.fencing_token = lease.fencing_token
    status.attempts = attempts
    status.holder_identity = lease.holder_identity
    known_failed = status.failed
    verdict = failure_policy.verdict(job, lease, pods)
    excusable = (
        verdict is not None
        and verdict.action == FailureAction.IGNORE
        and lease.uncounted_attempts < api.MAX_UNCOUNTED_ATTEMPTS
        # A cap at the lease's ceiling (a schedule's run used its room, or
        # was closed) cannot rise: the attempt counts.
        and protocol.cap_may_rise(lease)
    )
    failed_now = lease.completion is not None and lease.completion.outcome == Outcome.FAILED
    failed_now = failed_now and not excusable
    status.failed = lease.failures + (1 if failed_now else 0)
    started_pod = pod_name(str(job.metadata.get("name", "")), lease.fencing_token)
    status = _track_attempts(
        status, lease, pods, ctx.now, last_reclaim_reason, started_token, started_pod
    )
    stale = lease.fencing_token if job.spec.template is not None else 0
    if not job.spec.suspend and suspension.is_suspended(status):
        message = suspension.resumed_message(lease.fencing_token)
        status = _with(
            ctx,
            status,
            Phase(status.phase or Phase.PENDING),
            (suspension.CONDITION, ConditionStatus.FALSE, suspension.JOB_RESUMED, message),
        )
    seen = _Seen(
        lease=lease,
        attempts=attempts,
        verdict=verdict,
        excusable=excusable,
        failed_now=failed_now,
        known_failed=known_failed,
        stale=stale,
        last_reclaim_reason=last_reclaim_reason,
    )
    return seen, status


def _completed(ctx: _Ctx, status: LeasedJobStatus, seen: _Seen, c: Completion) -> Plan:
    """The plan once a completion is recorded on the lease: judge it, retry, or finish.

    A completion that landed first stands, even against a later cancel or
    the deadline. A failure rule (or a disruption) may decide the attempt
    first; a Failed completion that ``backoffLimit`` still allows is retried
    (:func:`_retry`), unless the job is cancelled; anything else finishes
    the job with the completion's outcome.
    """
    job, lease, failed_now = ctx.job, seen.lease, seen.failed_now
    status.completion = api.CompletionRecord(
        fencing_token=c.fencing_token,
        holder_identity=c.holder_identity,
        outcome=c.outcome,
        complete_time=c.complete_time,
        message=c.message or None,
        exit_code=c.exit_code,
    )
    if seen.verdict is not None and not job.spec.cancel:
        ruled = _ruled(ctx, status, seen.verdict, c.fencing_token, seen.excusable, completed=True)
        if ruled is not None:
            return ruled
    retry = lease.failures < job.spec.backoff_limit
    retry = failed_now and retry and seen.attempts < attempt_limit(job, lease)
    if retry and not job.spec.cancel:
        return _retry(ctx, status, lease, c, first_sight=seen.known_failed != status.failed)
    reason = "Completed" if c.outcome == Outcome.SUCCEEDED else "WorkerFailed"
    if failed_now:
        # batch/v1: a counted failure past backoffLimit (0 included, the default).
        reason = CANCELLED if retry else "BackoffLimitExceeded"
    message = f"{c.holder_identity} completed with {c.outcome} under fencing token" + (
        f" {c.fencing_token}" + (f": {c.message}" if c.message else "")
    )
    status = _finished(ctx, status, c.outcome, reason, message)
    return Plan(
        Action.NONE,
        status,
        events=[JobEvent("Normal" if reason == "Completed" else "Warning", reason, message)],
    )


def _cancelled(ctx: _Ctx, status: LeasedJobStatus, seen: _Seen) -> Plan:
    """The plan of a job cancelled (``spec.cancel``) with no completion: stop its lease.

    The lease is stopped now, not when the attempt's pod happens to die, so
    writes under its token are refused from this moment; the open attempt
    ends as cancelled.
    """
    lease = seen.lease
    message = (
        f"The job was cancelled (spec.cancel); its lease (token {lease.fencing_token}) was"
        " stopped: writes under that token are refused from now on."
    )
    status = _finished(ctx, status, Outcome.FAILED, CANCELLED, message)
    history = _end_attempt(list(status.attempt_history or []), AttemptReason.CANCELLED, ctx.now)
    return Plan(
        Action.STOP,
        _with_history(status, history),
        events=[JobEvent("Warning", CANCELLED, message)],
        delete_pods_below_token=lease.fencing_token + 1 if seen.stale else 0,
    )


def _deadline_exceeded(ctx: _Ctx, status: LeasedJobStatus, seen: _Seen, deadline: int) -> Plan:
    """The plan of a job past ``activeDeadlineSeconds`` with no completion: stop its lease.

    Judged after a cancel (which says why the job ended first) and before a
    suspension (a suspended job's deadline still runs); the open attempt
    ends as ``DeadlineExceeded``.
    """
    lease = seen.lease
    message = (
        f"The job ran longer than activeDeadlineSeconds={deadline}; its lease"
        f" (token {lease.fencing_token}) was taken back without a completion."
    )
    status = _finished(ctx, status, Outcome.FAILED, "DeadlineExceeded", message)
    history = _end_attempt(
        list(status.attempt_history or []), AttemptReason.DEADLINE_EXCEEDED, ctx.now
    )
    status = _with_history(status, history)
    return Plan(
        Action.STOP,
        status,
        events=[JobEvent("Warning", "DeadlineExceeded", message)],
        delete_pods_below_token=lease.fencing_token + 1 if seen.stale else 0,
    )


def _held(
    ctx: _Ctx, status: LeasedJobStatus, seen: _Seen, holder: str, pod_created_for_holder: bool
) -> Plan:
    """The plan while the lease is held: the attempt runs; wait for it.

    The only thing to do is the holder's pod, if the operator claimed the
    lease for it but never created it (it crashed between the claim and the
    pod): ``START_POD``. Pods of earlier tokens are stale.
    """
    job, lease = ctx.job, seen.lease
    true = ConditionStatus.TRUE
    status = _with(
        ctx,
        status,
        Phase.RUNNING,
        (
            "LeaseHeld",
            true,
            "Claimed",
            f"{holder} holds the lease under token {lease.fencing_token}.",
        ),
        (
            "Ready",
            true,
            "Running",
            f"Attempt {seen.attempts} of {attempt_limit(job, lease)} is running.",
        ),
    )
    name = str(job.metadata.get("name", ""))
    if (
        job.spec.template is not None
        and not pod_created_for_holder
        and holder == pod_name(name, lease.fencing_token)
    ):
        return Plan(
            Action.START_POD,
            status,
            pod_name=holder,
            token=lease.fencing_token,
            delete_pods_below_token=seen.stale,
        )
    return Plan(Action.NONE, status, delete_pods_below_token=seen.stale)


def _unheld(ctx: _Ctx, status: LeasedJobStatus, seen: _Seen) -> Plan:
    """The plan while the lease is unheld and not completed: give up, wait, or claim.

    The lease was released, reclaimed, reopened after a failure, excused,
    or never claimed. In order: a failure rule (or a disruption) may decide
    the ended attempt; with the attempts used up the job fails
    (:func:`_exhausted`); after a reclaim the next attempt may wait for its
    backoff (:func:`_reclaim_backoff`, not at a resume, which starts the next
    at once); a pull job waits for a pool's worker; a push job claims the
    lease for its next pod (:func:`_claim`).
    """
    job, lease, stale = ctx.job, seen.lease, seen.stale
    if seen.verdict is not None:
        ruled = _ruled(ctx, status, seen.verdict, lease.fencing_token, seen.excusable, stale=stale)
        if ruled is not None:
            return ruled
    limit = attempt_limit(job, lease)
    status.next_attempt_after = None
    never_started = seen.last_reclaim_reason == STARTUP_DEADLINE_EXCEEDED
    ended = (
        f"attempt {lease.fencing_token} did not start within startupDeadlineSeconds="
        f"{job.spec.startup_deadline_seconds}"
        if never_started
        else None
    )
    # Attempts neither retried for a failure, ended by a suspension nor excused:
    attempts = seen.attempts
    reclaimed = attempts - lease.failures - lease.suspensions - lease.uncounted_attempts
    if attempts >= limit or reclaimed >= job.spec.max_attempts:
        return _exhausted(ctx, status, seen, reclaimed, ended)
    # Push mode only: a pull pool claims an unheld lease when it likes.
    resuming = suspension.is_suspended(ctx.status())  # a resume starts the next at once
    if stale and reclaimed > 0 and not resuming and failure_policy.ended_as_reclaim(job, lease):
        waiting = _reclaim_backoff(ctx, status, lease, reclaimed, seen.last_reclaim_reason)
        if waiting is not None:
            return waiting
    if job.spec.template is None:
        message = "Pull mode: waiting for a worker to claim."
        status = _with(
            ctx,
            status,
            Phase.PENDING,
            ("LeaseHeld", ConditionStatus.FALSE, "WaitingForWorker", message),
            ("Ready", ConditionStatus.TRUE, "WaitingForWorker", message),
        )
        return Plan(Action.NONE, status)
    return _claim(ctx, status, seen, ended)


def _exhausted(
    ctx: _Ctx, status: LeasedJobStatus, seen: _Seen, reclaimed: int, ended: str | None
) -> Plan:
    """The plan when no attempt is left: fail the job and stop its lease.

    Either every claim the job may make was made (:func:`attempt_limit`) or
    ``maxAttempts`` attempts ended without a completion; ``ended`` says how
    the last one did, when that is known (it never started).
    """
    lease, stale = seen.lease, seen.stale
    reason = STARTUP_DEADLINE_EXCEEDED if ended else "AttemptsExhausted"
    message = (
        f"All {reclaimed} attempts were used; the last lease (token"
        f" {lease.fencing_token}) ended without a completion" + (f": {ended}." if ended else ".")
    )
    status = _finished(ctx, status, Outcome.FAILED, reason, message)
    return Plan(
        Action.STOP,
        status,
        events=[JobEvent("Warning", reason, message)],
        delete_pods_below_token=stale + 1 if stale else 0,
    )


def _claim(ctx: _Ctx, status: LeasedJobStatus, seen: _Seen, ended: str | None) -> Plan:
    """The plan of a push job whose unheld lease may be claimed: claim it, then start the pod.

    The next attempt runs under the next token, in the pod named after it;
    every pod up to the current token is stale. ``ended`` says why the last
    attempt ended, when that is worth telling (it never started).
    """
    lease = seen.lease
    in_the_way = replacement.pods_in_the_way(ctx.job, ctx.pods, lease.fencing_token + 1)
    if in_the_way:
        return _wait_for_pods(ctx, status, in_the_way)
    next_pod = pod_name(str(ctx.job.metadata.get("name", "")), lease.fencing_token + 1)
    status = _with(
        ctx,
        status,
        Phase.PENDING,
        (
            "LeaseHeld",
            ConditionStatus.FALSE,
            "Claiming",
            f"Claiming the lease for {next_pod}" + (f" ({ended})." if ended else "."),
        ),
    )
    return Plan(
        Action.CLAIM_AND_START,
        status,
        pod_name=next_pod,
        token=lease.fencing_token + 1,
        delete_pods_below_token=seen.stale + 1,
    )


def _wait_for_pods(ctx: _Ctx, status: LeasedJobStatus, tokens: list[int]) -> Plan:
    """The plan of a next attempt that waits for earlier pods to be terminal.

    ``podReplacementPolicy: Failed`` (batch/v1 Job's): the earlier attempts
    are fenced already; their pods are deleted (those not being deleted yet)
    and the claim waits until each is gone or ``Succeeded``/``Failed``. The
    Event is told when the wait starts (the condition did not say so yet).
    """
    name = str(ctx.job.metadata.get("name", ""))
    message = replacement.wait_message([pod_name(name, t) for t in tokens])
    before = (ctx.job.status.conditions if ctx.job.status else None) or []
    told = any(
        c.type == "LeaseHeld" and c.reason == replacement.WAITING_FOR_POD_TERMINATION
        for c in before
    )
    reason = replacement.WAITING_FOR_POD_TERMINATION
    status = _with(
        ctx,
        status,
        Phase.PENDING,
        ("LeaseHeld", ConditionStatus.FALSE, reason, message),
        ("Ready", ConditionStatus.FALSE, reason, message),
    )
    delete = replacement.must_delete(ctx.pods, tokens)
    return Plan(
        Action.WAIT_FOR_PODS,
        status,
        events=[] if told else [JobEvent("Normal", reason, message)],
        delete_pods_below_token=max(tokens) + 1 if delete else 0,
        requeue_after_seconds=replacement.RECHECK_SECONDS,
    )


def _suspension(ctx: _Ctx, status: LeasedJobStatus, lease: LeaseRecord, stale: int) -> Plan:
    """The plan while ``spec.suspend`` and the lease disagree, or both say suspended.

    Suspending ends the running attempt fenced (``SUSPEND``: one lease write,
    then its pods go); a suspended lease whose job is no longer suspended is
    resumed (``RESUME``, then a claim). A completion, a cancel and the
    deadline are judged before this (a completion that landed first stands);
    the attempt budget is judged once the job runs again.
    """
    if not ctx.job.spec.suspend:
        return Plan(Action.RESUME, status)
    held = lease.holder_identity is not None
    message = suspension.suspended_message(lease.fencing_token, held, bool(stale))
    false = ConditionStatus.FALSE
    status = _with(
        ctx,
        status,
        Phase.SUSPENDED,
        (suspension.CONDITION, ConditionStatus.TRUE, suspension.JOB_SUSPENDED, message),
        ("LeaseHeld", false, suspension.SUSPENDED, "The job is suspended: the lease is unheld."),
        ("Ready", false, suspension.SUSPENDED, message),
    )
    status = status.model_copy(update={"holder_identity": None, "next_attempt_after": None})
    delete = stale + 1 if stale else 0
    if lease.suspended:
        return Plan(Action.NONE, status, delete_pods_below_token=delete)
    history = _end_attempt(list(status.attempt_history or []), AttemptReason.SUSPENDED, ctx.now)
    return Plan(Action.SUSPEND, _with_history(status, history), delete_pods_below_token=delete)


def _ruled(
    ctx: _Ctx,
    status: LeasedJobStatus,
    verdict: Verdict,
    token: int,
    excusable: bool,
    *,
    completed: bool = False,
    stale: int = 0,
) -> Plan | None:
    """The plan when a failure rule (or a disruption) decides the ended attempt, else ``None``.

    FailJob fails the job at once (a lease not ``completed`` is stopped;
    ``stale``: its pods' token for a push job, else 0); FailIndex likewise
    fails an index (the indexed planner tells them apart by the reason);
    Ignore excuses the attempt from every budget and the next one starts at once.
    """
    if verdict.action in (FailureAction.FAIL_JOB, FailureAction.FAIL_INDEX):
        reason = POD_FAILURE_POLICY if verdict.action == FailureAction.FAIL_JOB else FAIL_INDEX
        message = f"Attempt {token} ended: {verdict.message}."
        history = list(status.attempt_history or [])
        if history and history[-1].fencing_token == token and history[-1].reason is not None:
            history[-1] = history[-1].model_copy(update={"reason": AttemptReason.FAILED})
        status = _with_history(status, history)
        status = _finished(ctx, status, Outcome.FAILED, reason, message)
        return Plan(
            Action.NONE if completed else Action.STOP,
            status,
            events=[JobEvent("Warning", reason, message)],
            delete_pods_below_token=token + 1 if stale else 0,
        )
    if excusable:
        reason = "Evicted" if verdict.disrupted else "FailureIgnored"
        message = (
            f"Attempt {token} is not counted against the job's budgets: {verdict.message};"
            " starting the next attempt."
        )
        return Plan(Action.EXCUSE, status, events=[JobEvent("Normal", reason, message)])
    return None


def _reclaim_backoff(
    ctx: _Ctx,
    status: LeasedJobStatus,
    lease: LeaseRecord,
    reclaims: int,
    why: str | None,
) -> Plan | None:
    """The plan while the next attempt after a reclaim waits for its backoff, else ``None``.

    The delay is ``spec.backoff``'s for the job's counted ends so far
    (failures and reclaims), as after a failure; its end is kept in
    ``status.nextAttemptAfter`` (late if that write is lost). Only an attempt
    the job's history knows is held back (not an index of an Indexed job).
    """
    token = lease.fencing_token
    delay = ctx.job.spec.backoff.delay_seconds(lease.failures + reclaims)
    before = ctx.job.status or LeasedJobStatus()
    last = before.attempt_history[-1] if before.attempt_history else None
    if last is None or last.fencing_token != token:
        # The history does not know the attempt (an index of an Indexed job has
        # none; a lost status write): it is not held back.
        return None
    # The delay kept in the status is this reclaim's only if the status already
    # tells attempt `token` ended; else it is seen for the first time.
    seen = last.reason is not None
    first_sight = not seen or before.next_attempt_after is None
    after = ctx.now + timedelta(seconds=delay) if first_sight else before.next_attempt_after
    assert after is not None
    if ctx.now >= after:
        return None
    message = (
        f"Attempt {token} ended without a completion ({why or 'released or reclaimed'});"
        f" retrying in {delay:g}s (reclaim {reclaims} of maxAttempts="
        f"{ctx.job.spec.max_attempts})."
    )
    status = _with(
        ctx,
        status.model_copy(update={"next_attempt_after": after}),
        Phase.PENDING,
        ("LeaseHeld", ConditionStatus.FALSE, BACKING_OFF, message),
        ("Ready", ConditionStatus.FALSE, BACKING_OFF, message),
    )
    return Plan(
        Action.NONE,
        status,
        events=[JobEvent("Warning", BACKING_OFF, message)] if first_sight else [],
        requeue_after_seconds=(after - ctx.now).total_seconds(),
    )


def _retry(
    ctx: _Ctx,
    status: LeasedJobStatus,
    lease: LeaseRecord,
    failure: Completion,
    *,
    first_sight: bool,
) -> Plan:
    """The plan for a failed attempt that ``backoffLimit`` lets retry.

    The Failed completion stays on the lease until the backoff delay is
    over, so nothing (not a pool's worker either) can claim it early; then
    the plan is ``RETRY``: reopen it, and claim. The delay's end is kept in
    ``status.nextAttemptAfter``; if that status write was lost, the delay
    starts again when the failure is seen again (late, never early).
    """
    failures = lease.failures + 1
    attempts = lease.fencing_token - lease.base_fencing_token
    reclaims = attempts - failures - lease.uncounted_attempts  # before this failure
    delay = ctx.job.spec.backoff.delay_seconds(failures + max(0, reclaims))
    after = status.next_attempt_after
    if first_sight or after is None:
        after = ctx.now + timedelta(seconds=delay)
    status = status.model_copy(update={"next_attempt_after": after})
    if ctx.now >= after:
        return Plan(Action.RETRY, status)
    message = (
        f"Attempt {failure.fencing_token} failed"
        + (f" (exit code {failure.exit_code})" if failure.exit_code is not None else "")
        + f"; retrying in {delay:g}s (failure {failures} of"
        f" backoffLimit={ctx.job.spec.backoff_limit})."
    )
    status = _with(
        ctx,
        status,
        Phase.PENDING,
        ("LeaseHeld", ConditionStatus.FALSE, BACKING_OFF, message),
        ("Ready", ConditionStatus.FALSE, BACKING_OFF, message),
    )
    return Plan(
        Action.NONE,
        status,
        events=[JobEvent("Warning", BACKING_OFF, message)] if first_sight else [],
        requeue_after_seconds=(after - ctx.now).total_seconds(),
    )
