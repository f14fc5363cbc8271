"""Suspend and resume (``spec.suspend``), as batch/v1 Job's: the pure parts.

Why this module exists: a queue such as Kueue admits a LeasedJob the way it
admits a Job, by creating it suspended and setting ``spec.suspend: false``;
it may suspend it again to preempt it. Suspending ends the running attempt
fenced: the operator releases its lease in one write (``store.suspend``), so
the attempt's late writes carry a token that is no longer held and, once
resumed, a lower one than the next attempt's. The write also counts the
suspension and raises the lease's cap by one: a suspended attempt uses no
budget (docs/architecture.md, "Suspend and resume").

This module says what the job's status and Events say about it; the
decision itself is a branch of :func:`leasehold.controller.plan.single.plan`.
No Kubernetes client or Kopf import here.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from leasehold.lease.models import Condition, ConditionStatus, LeasedJobStatus

CONDITION: Final = "Suspended"
"""The condition type, as batch/v1 Job's."""
JOB_SUSPENDED: Final = "JobSuspended"
"""The condition's reason while suspended (batch/v1 Job's word)."""
JOB_RESUMED: Final = "JobResumed"
"""The condition's reason once resumed (batch/v1 Job's word)."""
SUSPENDED: Final = "Suspended"
"""The Event's reason when a job is suspended."""
RESUMED: Final = "Resumed"
"""The Event's reason when a job is resumed."""


class Transition(NamedTuple):
    """An Event to record because the ``Suspended`` condition flipped."""

    type: str
    reason: str
    message: str


def is_suspended(status: LeasedJobStatus | None) -> bool:
    """Whether ``status`` says the job is suspended (its condition is True).

    Args:
        status: a job's status, or ``None``.

    Returns:
        ``True`` when the ``Suspended`` condition is ``True``.
    """
    return _condition(status) is ConditionStatus.TRUE


def suspended_message(token: int, held: bool, pod_deleted: bool) -> str:
    """The condition's message while suspended.

    Args:
        token: the lease's fencing token.
        held: whether an attempt held the lease when it was suspended.
        pod_deleted: whether that attempt's pod is deleted (push mode).

    Returns:
        A sentence for people.
    """
    if not held:
        return "The job is suspended (spec.suspend): no attempt starts until it is resumed."
    pod = " and its pod deleted" if pod_deleted else ""
    return (
        f"The job is suspended (spec.suspend): attempt {token} was ended{pod}; its lease"
        f" was released, so writes under fencing token {token} are refused. It uses no"
        " budget; resuming starts a new attempt under a higher token."
    )


def resumed_message(token: int) -> str:
    """The condition's message once resumed.

    Args:
        token: the lease's fencing token when resumed.

    Returns:
        A sentence for people.
    """
    return f"The job was resumed: its next attempt runs under a token above {token}."


def transition(old: LeasedJobStatus | None, new: LeasedJobStatus) -> Transition | None:
    """The Event for a flip of the ``Suspended`` condition between two statuses.

    Args:
        old: the status as read.
        new: the status planned.

    Returns:
        ``Suspended`` when it became True, ``Resumed`` when it went from True
        to False, else ``None`` (one Event per flip; a plan repeated on the
        same status records none).
    """
    before, after = _condition(old), _condition(new)
    if after is ConditionStatus.TRUE and before is not ConditionStatus.TRUE:
        return Transition("Normal", SUSPENDED, _message(new))
    if before is ConditionStatus.TRUE and after is ConditionStatus.FALSE:
        return Transition("Normal", RESUMED, _message(new))
    return None


def _find(status: LeasedJobStatus | None) -> Condition | None:
    conditions = (status.conditions if status is not None else None) or []
    return next((c for c in conditions if c.type == CONDITION), None)


def _condition(status: LeasedJobStatus | None) -> ConditionStatus | None:
    found = _find(status)
    return None if found is None else ConditionStatus(found.status)


def _message(status: LeasedJobStatus) -> str:
    found = _find(status)
    return found.message if found is not None else ""
