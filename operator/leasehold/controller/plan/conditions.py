"""Conditions per the Kubernetes API conventions: a list keyed by ``type``.

Why this module exists: every kind of job (single, indexed, schedule) reports
its state the same way, and the rule of ``lastTransitionTime`` (it moves only
when ``status`` flips) lives in one place.
"""

from __future__ import annotations

from datetime import datetime

from leasehold.lease import api
from leasehold.lease.api import Condition, ConditionStatus, LeasedJob, LeasedJobStatus
from leasehold.lease.leaseops import MAX_MESSAGE_LENGTH


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """Set one condition in a list keyed by ``type``.

    ``lastTransitionTime`` changes only when ``status`` flips (Kubernetes API
    conventions, "Typical status properties").

    Args:
        conditions: the current conditions (not modified).
        type_: the condition type.
        status: its new status.
        reason: CamelCase reason.
        message: human-readable message.
        now: the time to stamp a transition with.
        generation: the job's ``metadata.generation`` this is based on.

    Returns:
        A new list with the condition set.
    """
    out = [c for c in conditions if c.type != type_]
    old = next((c for c in conditions if c.type == type_), None)
    transition = now
    if old is not None and old.status == status and old.last_transition_time is not None:
        transition = old.last_transition_time  # another writer's condition may have no time
    out.append(
        Condition(
            type=type_,
            status=status,
            reason=reason,
            message=message[:MAX_MESSAGE_LENGTH],
            last_transition_time=transition,
            observed_generation=generation,
        )
    )
    return sorted(out, key=lambda c: c.type)


def with_conditions(
    job: LeasedJob,
    status: LeasedJobStatus,
    *conds: tuple[str, str, str, str],
    now: datetime,
) -> LeasedJobStatus:
    """``status`` with conditions ``(type, status, reason, message)`` set."""
    generation = job.metadata.get("generation")
    conditions = list(status.conditions or [])
    for type_, cstatus, reason, message in conds:
        conditions = set_condition(
            conditions,
            type_,
            api.ConditionStatus(cstatus),
            reason,
            message,
            now=now,
            generation=int(generation) if generation is not None else None,
        )
    return status.model_copy(update={"conditions": conditions})
