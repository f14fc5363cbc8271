"""batch/v1's interim conditions: ``SuccessCriteriaMet``/``FailureTarget`` first, then the end.

Why this module exists: a batch/v1 Job that is decided (succeeded, or
failed) first gets the interim condition ``SuccessCriteriaMet`` or
``FailureTarget`` (with the decision's reason and message), and
``Complete``/``Failed`` only once none of its pods is left running
(pkg/controller/job/job_controller.go, the ``delayTerminalCondition``
handling of the JobManagedBy and JobPodReplacementPolicy features). A
LeasedJob does the same for every kind of job, single or with several
completions: the planners decide as before, and this module turns their
final status into the interim one while pods remain, and into the final
one after. What leasehold adds: at the decision the job's leases are
already stopped (or completed), so a pod that is still terminating can
neither renew nor complete; the wait is for people and for tools that
read ``Complete``/``Failed`` as "nothing of this job runs any more".

A pod that never terminates (its node gone) would keep batch/v1's Job
waiting; here the final condition is written anyway once the pods had
their termination grace period plus :data:`TERMINATION_MARGIN_SECONDS`
since the decision (their writes are fenced, so waiting longer protects
nothing), and its message says how many pods were left.

No Kubernetes client or Kopf import: the actors count the pods.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from leasehold.controller.plan.conditions import set_condition
from leasehold.lease.api import Condition, ConditionStatus, LeasedJob, LeasedJobStatus, Phase

COMPLETE: Final = "Complete"
FAILED: Final = "Failed"
SUCCESS_CRITERIA_MET: Final = "SuccessCriteriaMet"
FAILURE_TARGET: Final = "FailureTarget"

INTERIM: Final = {COMPLETE: SUCCESS_CRITERIA_MET, FAILED: FAILURE_TARGET}
"""The interim condition of each final one."""

DEFAULT_GRACE_SECONDS: Final = 30
"""A pod's ``terminationGracePeriodSeconds`` when its template sets none (core/v1's default)."""

TERMINATION_MARGIN_SECONDS: Final = 30.0
"""How long past the pods' grace period the final condition waits for them at most."""

POLL_SECONDS: Final = 1.0
"""How soon a decided job looks at its pods again while some are left."""

_FINISHED: Final = (Phase.SUCCEEDED, Phase.FAILED)


@dataclass(frozen=True)
class Terminal:
    """The status to write for a job near its end, and when to look at its pods again.

    Attributes:
        status: the status (interim or final).
        requeue_after_seconds: look again after this long (pods are left), else ``None``.
        finished: the final condition was set by this call (for the log).
    """

    status: LeasedJobStatus
    requeue_after_seconds: float | None = None
    finished: bool = False


def _true(status: LeasedJobStatus | None, type_: str) -> Condition | None:
    for c in (status.conditions if status is not None else None) or []:
        if c.type == type_ and c.status == ConditionStatus.TRUE:
            return c
    return None


def decided(status: LeasedJobStatus | None) -> bool:
    """Whether the job is decided but not finished: an interim condition without its final one.

    The planners then plan nothing more for it (its leases were stopped at
    the decision); :func:`settle` writes the final condition.

    Args:
        status: the job's status as read.

    Returns:
        ``True`` while ``SuccessCriteriaMet`` or ``FailureTarget`` is True
        and ``Complete``/``Failed`` is not.
    """
    return any(
        _true(status, interim) is not None and _true(status, final) is None
        for final, interim in INTERIM.items()
    )


def wants_pods(before: LeasedJobStatus | None, after: LeasedJobStatus) -> bool:
    """Whether :func:`settle` needs the count of the job's pods left (the actor lists them).

    Args:
        before: the status as read.
        after: the status planned.

    Returns:
        ``True`` when the job is decided now or was decided before and has
        no final condition yet.
    """
    if decided(after):
        return True
    return after.phase in _FINISHED and not any(_true(before, f) for f in INTERIM)


def grace_seconds(job: LeasedJob) -> float:
    """How long the job's pods may take to terminate before the final condition is written anyway.

    Args:
        job: the LeasedJob (its template's ``terminationGracePeriodSeconds``).

    Returns:
        Seconds from the decision: the grace period (core/v1's default 30
        when unset, or in pull mode) plus :data:`TERMINATION_MARGIN_SECONDS`.
    """
    spec = job.spec.template.spec if job.spec.template is not None else {}
    grace = spec.get("terminationGracePeriodSeconds")
    base = DEFAULT_GRACE_SECONDS if grace is None else int(grace)
    return base + TERMINATION_MARGIN_SECONDS


def settle(
    job: LeasedJob,
    before: LeasedJobStatus | None,
    after: LeasedJobStatus,
    pods_left: int,
    *,
    now: datetime,
    waited_seconds: float = 0.0,
) -> Terminal:
    """Put batch/v1's interim condition before the final one.

    Three cases. ``after`` is final and the job was not (the decision):
    the interim condition is set with the final condition's reason and
    message; while ``pods_left`` the final condition is held back (phase
    and ``completionTime`` as before). ``after`` is decided (the interim
    condition alone, as written earlier): once no pod is left, or the pods
    outlived :func:`grace_seconds`, the final condition is set (the
    interim's reason and message), with the phase and ``completionTime``.
    Anything else is returned as it is.

    Args:
        job: the LeasedJob (its generation, its template's grace period).
        before: the status as read.
        after: the status planned.
        pods_left: the job's pods not yet terminal (Succeeded, Failed or gone).
        now: the current time (condition stamps only: never judged).
        waited_seconds: how long the operator has seen the job decided, on its
            monotonic clock (0 at the decision; from 0 again after a restart,
            so the bound is never cut short).

    Returns:
        The :class:`Terminal`.
    """
    generation = job.metadata.get("generation")
    gen = int(generation) if generation is not None else None
    if after.phase in _FINISHED and not any(_true(before, f) for f in INTERIM):
        final = COMPLETE if after.phase == Phase.SUCCEEDED else FAILED
        ended = _true(after, final)
        if ended is None:
            return Terminal(after)
        conditions = set_condition(
            list(after.conditions or []),
            INTERIM[final],
            ConditionStatus.TRUE,
            ended.reason or final,  # conditions added through /status may lack both
            ended.message,
            now=ended.last_transition_time or now,  # the decision's time, never after the final's
            generation=gen,
        )
        if pods_left <= 0:
            return Terminal(after.model_copy(update={"conditions": conditions}), finished=True)
        held_phase = before.phase if before is not None and before.phase else Phase.RUNNING
        held = after.model_copy(
            update={
                "conditions": [c for c in conditions if c.type != final],
                "phase": held_phase,
                "completion_time": None,
            }
        )
        return Terminal(held, POLL_SECONDS)
    if not decided(after):
        return Terminal(after)
    return _finish_decided(job, after, pods_left, now=now, waited=waited_seconds, generation=gen)


def _finish_decided(
    job: LeasedJob,
    status: LeasedJobStatus,
    pods_left: int,
    *,
    now: datetime,
    waited: float,
    generation: int | None,
) -> Terminal:
    """The final condition of a decided job once its pods are gone (or waited out ``waited`` s)."""
    final = COMPLETE if _true(status, SUCCESS_CRITERIA_MET) is not None else FAILED
    interim = _true(status, INTERIM[final])
    assert interim is not None
    bound = grace_seconds(job)
    if pods_left > 0 and waited < bound:
        return Terminal(status, min(POLL_SECONDS, bound - waited))
    message = interim.message
    if pods_left > 0:
        message += (
            f" {pods_left} pod(s) still not terminated {waited:.0f}s after the decision"
            " (their leases are stopped: their writes are refused)."
        )
    conditions = set_condition(
        list(status.conditions or []),
        final,
        ConditionStatus.TRUE,
        interim.reason or final,
        message,
        now=now,
        generation=generation,
    )
    done = status.model_copy(
        update={
            "conditions": conditions,
            "phase": Phase.SUCCEEDED if final == COMPLETE else Phase.FAILED,
            "completion_time": status.completion_time or now,
            "observed_generation": generation,
        }
    )
    return Terminal(done, finished=True)
