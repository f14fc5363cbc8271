"""Pure judgement of an attempt that ended without success: fail, ignore or count.

Why this module exists: ``spec.podFailurePolicy`` (batch/v1 Job's rules, on
exit codes and pod conditions) decides whether an attempt's end fails the job
at once, draws on no budget, or counts as usual. The matching is a function
of plain values (what was read of the attempt's pod and its completion), kept
apart from the planner so it can be tested exhaustively.

Without a matching rule a disrupted pod (condition ``DisruptionTarget=True``,
which the API server sets on an eviction, a preemption or a node shutdown) is
ignored: the disruption is not the job's fault. An attempt whose lease was
lost ended as a reclaim: the wrapper's exit code 75 (``leasehold run``'s
"lease lost") is not a failure code and no rule sees it.

:func:`judge` matches one ended attempt; :func:`verdict` picks the attempt to
judge from a job and its lease (the planner's entry point).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from leasehold.lease.api import (
    AttemptReason,
    ConditionStatus,
    ExitCodeOperator,
    FailureAction,
    FailureRule,
    LeasedJob,
    PodFailurePolicy,
)
from leasehold.lease.protocol import LeaseRecord, Outcome

DISRUPTION_TARGET: Final = "DisruptionTarget"
"""The pod condition the API server sets on a disruption (eviction, preemption, shutdown)."""
POD_READY: Final = "Ready"
"""The pod condition of a pod whose containers pass their readiness checks."""
POD_SUCCEEDED: Final = "Succeeded"
POD_FAILED: Final = "Failed"
"""The terminal pod phases (with :data:`POD_SUCCEEDED`)."""
EXIT_LEASE_LOST: Final = 75
"""``leasehold run``'s exit code when its lease was lost (not the command's outcome)."""
SUSPENDED: Final = AttemptReason.SUSPENDED
POD_FAILURE_POLICY: Final = "PodFailurePolicy"
"""The job's Failed reason when a FailJob rule matched (batch/v1 Job's)."""
FAIL_INDEX: Final = "FailIndex"
"""The reason an index failed by a ``FailIndex`` rule (batch/v1 Job's)."""


class PodFacts(NamedTuple):
    """What the operator read of one attempt's pod (history and failure rules)."""

    uid: str | None
    node_name: str | None
    exit_code: int | None
    """The first container's exit code once it terminated, else ``None``."""
    exit_codes: tuple[tuple[str, int], ...] = ()
    """``(container name, exit code)`` of every terminated container (init ones too)."""
    conditions: tuple[tuple[str, str], ...] = ()
    """``(type, status)`` of the pod's conditions."""
    owner_uid: str | None = None
    """The UID of the LeasedJob incarnation that controls the pod (its controller
    ownerReference), if any: only its own pods tell how its attempts ended."""
    phase: str | None = None
    """``status.phase`` (``Pending``, ``Running``, ``Succeeded``, ``Failed``), if set."""
    deleting: bool = False
    """The pod has a ``deletionTimestamp`` (it is being deleted)."""
    gone: bool = False
    """The pod watch saw it deleted: it no longer exists."""

    @property
    def terminal(self) -> bool:
        """Whether the pod is terminal: gone, or phase ``Succeeded`` or ``Failed``.

        batch/v1: ``podutil.IsPodTerminal`` (a deleted pod no longer counts at all).
        """
        return self.gone or self.phase in (POD_SUCCEEDED, POD_FAILED)

    @property
    def terminating(self) -> bool:
        """Whether the pod is being deleted and not terminal yet (batch/v1 ``IsPodTerminating``)."""
        return self.deleting and not self.terminal

    @property
    def ready(self) -> bool:
        """Whether the pod is active (neither terminal nor being deleted) and ``Ready=True``.

        batch/v1: ``countReadyPods`` over the job's active pods
        (``controller.FilterActivePods``).
        """
        active = not self.terminal and not self.deleting
        return active and (POD_READY, str(ConditionStatus.TRUE)) in self.conditions

    @property
    def disrupted(self) -> bool:
        """Whether the pod has ``DisruptionTarget=True``."""
        return (DISRUPTION_TARGET, str(ConditionStatus.TRUE)) in self.conditions


@dataclass(frozen=True)
class AttemptEnd:
    """How one attempt ended, as far as the operator knows.

    Attributes:
        completed: the worker recorded a Failed completion (else the lease was
            released or reclaimed without one).
        completion_exit_code: the exit code the worker reported, if any.
        completion_container: the container the reported code is from (the
            template's only container), or ``None`` when unknown.
        pod: what was read of the attempt's pod, or ``None`` (pull mode, or gone
            before it was seen).
    """

    completed: bool
    completion_exit_code: int | None = None
    completion_container: str | None = None
    pod: PodFacts | None = None

    def exit_codes(self) -> set[tuple[str | None, int]]:
        """The non-zero exit codes to check, by container (``None``: unknown).

        Without a completion the wrapper's 75 (lease lost) is left out: that
        attempt ended as a reclaim, not as a failure.
        """
        codes: set[tuple[str | None, int]] = set()
        for name, code in self.pod.exit_codes if self.pod else ():
            if code != 0 and (self.completed or code != EXIT_LEASE_LOST):
                codes.add((name, code))
        if self.completed and self.completion_exit_code:
            codes.add((self.completion_container, self.completion_exit_code))
        return codes

    def conditions(self) -> Mapping[str, str]:
        """The pod's conditions, type to status (empty without a pod)."""
        return dict(self.pod.conditions) if self.pod else {}


class Verdict(NamedTuple):
    """What to do with an ended attempt.

    Attributes:
        action: FailJob, FailIndex, Ignore or Count.
        rule: the index of the matching rule, or ``None`` for the default.
        disrupted: the pod had ``DisruptionTarget=True``.
        message: why, for people (names the rule, the container, the code).
    """

    action: FailureAction
    rule: int | None
    disrupted: bool
    message: str


def _matches(rule: FailureRule, end: AttemptEnd) -> str | None:
    """What made ``rule`` match ``end`` (for the message), or ``None``."""
    codes = rule.on_exit_codes
    if codes is not None:
        for container, code in sorted(end.exit_codes(), key=lambda c: (c[0] or "", c[1])):
            if codes.container_name is not None and container != codes.container_name:
                continue
            inside = code in codes.values
            if inside == (codes.operator == ExitCodeOperator.IN):
                who = f"container {container}" if container else "the worker"
                return f"{who} exited with code {code}"
        return None
    conditions = end.conditions()
    for pattern in rule.on_pod_conditions or []:
        if conditions.get(pattern.type) == str(pattern.status):
            return f"the pod has condition {pattern.type}={pattern.status}"
    return None


def judge(policy: PodFailurePolicy | None, end: AttemptEnd) -> Verdict:
    """Decide what an attempt that ended without success means for its job.

    The rules are checked in order and the first match decides, as batch/v1
    Job's ``podFailurePolicy``: exit codes 0 never match, ``onExitCodes`` with a
    ``containerName`` sees only that container's code, ``onPodConditions``
    matches a pattern's type and status. With no match: ``Ignore`` for a
    disrupted pod, else ``Count``.

    Args:
        policy: the job's ``spec.podFailurePolicy``, or ``None``.
        end: how the attempt ended.

    Returns:
        The :class:`Verdict`.
    """
    disrupted = end.pod is not None and end.pod.disrupted
    for index, rule in enumerate(policy.rules if policy else []):
        why = _matches(rule, end)
        if why is not None:
            action = FailureAction(rule.action)
            message = f"{why}, matching the {action} rule at index {index}"
            return Verdict(action, index, disrupted, message)
    if disrupted:
        return Verdict(
            FailureAction.IGNORE,
            None,
            True,
            f"the pod has condition {DISRUPTION_TARGET}=True (a disruption: not counted)",
        )
    return Verdict(FailureAction.COUNT, None, False, "counted")


def verdict(job: LeasedJob, lease: LeaseRecord, pods: Mapping[int, PodFacts]) -> Verdict | None:
    """The failure rules' verdict on the lease's latest attempt, if it ended undecided.

    ``None`` while it runs, after a success, and once decided (its failure
    reopened, or it was excused): only an attempt whose Failed completion is
    still on the lease, or that ended without one, is judged.

    Args:
        job: the LeasedJob (its policy, template and attempt history).
        lease: its lease record.
        pods: what was read of its attempt pods, by fencing token.

    Returns:
        The :class:`Verdict`, or ``None`` when there is nothing to judge.
    """
    token = lease.fencing_token
    if token <= lease.base_fencing_token or lease.holder_identity is not None:
        return None
    done = lease.completion
    if done is not None:
        if done.outcome != Outcome.FAILED:
            return None
        containers = (job.spec.template.spec.get("containers") or []) if job.spec.template else []
        end = AttemptEnd(
            completed=True,
            completion_exit_code=done.exit_code,
            completion_container=str(containers[0].get("name")) if len(containers) == 1 else None,
            pod=pods.get(done.fencing_token),
        )
    elif (
        lease.last_uncounted_token == token
        or (lease.last_failure is not None and lease.last_failure.fencing_token == token)
        or _suspended(job, token)
    ):
        return None
    else:
        pod = pods.get(token)
        history = job.status.attempt_history if job.status else None
        last = history[-1] if history else None
        if pod is not None and last is not None and last.fencing_token == token and last.reason:
            # Its end was seen before: a code the pod exits with since (a worker
            # learning only then that its lease is gone) is not the attempt's
            # outcome; its conditions (a late-seen disruption) still count.
            pod = pod._replace(exit_code=None, exit_codes=())
        end = AttemptEnd(completed=False, pod=pod)
    return judge(job.spec.pod_failure_policy, end)


def _suspended(job: LeasedJob, token: int) -> bool:
    """Whether the job's history says its attempt under ``token`` ended by a suspension."""
    history = job.status.attempt_history if job.status else None
    last = history[-1] if history else None
    return last is not None and last.fencing_token == token and last.reason == SUSPENDED


def ended_as_reclaim(job: LeasedJob, lease: LeaseRecord) -> bool:
    """Whether the lease's latest attempt ended as a reclaim.

    Not: completed, reopened after a failure, excused, or ended by a
    suspension (that one used no budget either; the next starts at resume).

    Args:
        job: the LeasedJob (its attempt history).
        lease: an unheld lease record.

    Returns:
        ``True`` when its latest attempt used the reclaim budget.
    """
    token = lease.fencing_token
    if _suspended(job, token):
        return False
    reopened = lease.last_failure is not None and lease.last_failure.fencing_token == token
    return (
        token > lease.base_fencing_token
        and lease.completion is None
        and not reopened
        and lease.last_uncounted_token != token
    )
