"""When the next attempt's pod may be created: batch/v1 Job's ``podReplacementPolicy``.

Why this module exists: a fenced-off attempt's writes are refused whatever
its pod does, but its pod still holds what it was given (a GPU, a hostPort,
memory) until it is terminal. ``podReplacementPolicy: Failed`` makes the next
attempt wait for that, as batch/v1 Job does (``onlyReplaceFailedPods`` in
``pkg/controller/job/job_controller.go``: terminating pods count as active,
so no replacement is made for them); ``TerminatingOrFailed`` claims the next
token as soon as the lease allows it. Pure: the caller gives the pods (the
pod watch's memory, or a list).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from leasehold.controller.plan.failure_policy import PodFacts
from leasehold.lease.api import LeasedJob, PodReplacementPolicy

WAITING_FOR_POD_TERMINATION: Final = "WaitingForPodTermination"
"""The reason (condition, Event) of a next attempt that waits for earlier pods."""
RECHECK_SECONDS: Final = 10.0
"""Look again this often while waiting: the pod watch's events bring the reconcile
that ends the wait; this only backs them up."""


def policy(job: LeasedJob) -> PodReplacementPolicy:
    """The job's ``podReplacementPolicy``, defaulted as batch/v1 defaults it.

    Unset: ``Failed`` when ``podFailurePolicy`` is set, else
    ``TerminatingOrFailed`` (``pkg/apis/batch/v1/defaults.go``).

    Args:
        job: the LeasedJob.

    Returns:
        The policy in force.
    """
    if job.spec.pod_replacement_policy is not None:
        return job.spec.pod_replacement_policy
    if job.spec.pod_failure_policy is not None:
        return PodReplacementPolicy.FAILED
    return PodReplacementPolicy.TERMINATING_OR_FAILED


def waits_for_terminal(job: LeasedJob) -> bool:
    """Whether a next attempt of this job waits for earlier pods to be terminal.

    Args:
        job: the LeasedJob.

    Returns:
        ``True`` for a push job (it has pods) whose policy is ``Failed``.
    """
    return job.spec.template is not None and policy(job) == PodReplacementPolicy.FAILED


def pods_in_the_way(job: LeasedJob, pods: Mapping[int, PodFacts], next_token: int) -> list[int]:
    """The tokens of earlier attempts whose pods the next attempt must wait for.

    Args:
        job: the LeasedJob (of one index: the index's pods are given).
        pods: the job's (index's) attempt pods of this incarnation, by token.
        next_token: the token the next attempt would claim.

    Returns:
        Sorted tokens below ``next_token`` whose pods are not terminal (not gone,
        not ``Succeeded``/``Failed``); empty when the policy is not ``Failed``.
    """
    if not waits_for_terminal(job):
        return []
    return sorted(t for t, facts in pods.items() if t < next_token and not facts.terminal)


def must_delete(pods: Mapping[int, PodFacts], waiting_for: list[int]) -> bool:
    """Whether some pod waited for is not being deleted yet (the operator deletes it).

    Args:
        pods: the attempt pods by token.
        waiting_for: the tokens :func:`pods_in_the_way` returned.

    Returns:
        ``True`` when a delete is needed for the wait to end.
    """
    return any(not pods[t].deleting for t in waiting_for)


def wait_message(pod_names: list[str]) -> str:
    """What the job waits for, for a condition, an Event and the log.

    Args:
        pod_names: the pods waited for (not empty).

    Returns:
        A sentence naming them.
    """
    which = ", ".join(pod_names)
    return (
        f"podReplacementPolicy is Failed: the next attempt waits until pod {which} of an"
        " earlier attempt is terminal (gone, Succeeded or Failed); its writes are fenced"
        " already. A pod stuck terminating holds the job here, as it holds a batch/v1 Job."
    )
