"""Which attempt pods to keep (``spec.podRetention``): the pure rule.

Why this module exists: every attempt has its own pod (named by its fencing
token). Once an attempt is fenced off (reclaimed, retried after a failure,
suspended, stopped) its pod is deleted, so a stalled worker stops using the
node; the last attempt's pod is kept after the job finishes, for
``kubectl logs``. ``spec.podRetention`` changes that:

* ``Last`` (default): as above.
* ``None``: the last attempt's pod is deleted too, once the job finished.
* ``All``: an attempt's pod that has ended (Succeeded or Failed), or whose
  attempt completed (it is about to end), is kept, whatever its attempt; one
  still running when its attempt was fenced off without a completion
  (reclaimed, suspended, stopped) is deleted as always (its writes are
  refused anyway; it could run for ever).

The planner (:func:`leasehold.controller.plan.single.plan`) says which tokens
are fenced off; this module adjusts that to the job's retention. No
Kubernetes client or Kopf import here.
"""

from __future__ import annotations

from typing import NamedTuple

from leasehold.lease.models import AttemptReason, LeasedJob, LeasedJobStatus, Phase, PodRetention

_FINISHED = (Phase.SUCCEEDED, Phase.FAILED)
_COMPLETED = (AttemptReason.SUCCEEDED, AttemptReason.FAILED)


class PodDeletion(NamedTuple):
    """Which of a job's attempt pods to delete.

    Attributes:
        below_token: delete pods whose token is lower (``0``: none).
        keep_ended: keep pods that have ended (Succeeded/Failed) all the same.
        keep_tokens: keep the pods of these attempts all the same (they
            completed: their pods end by themselves).
    """

    below_token: int
    keep_ended: bool = False
    keep_tokens: frozenset[int] = frozenset()


def pod_deletion(job: LeasedJob, planned: LeasedJobStatus, fenced_below: int) -> PodDeletion:
    """The pods to delete for ``job``, given the tokens the planner fenced off.

    Args:
        job: the job as read (its status before this plan).
        planned: the status planned now.
        fenced_below: the planner's choice: pods below this token are fenced off.

    Returns:
        The :class:`PodDeletion`.
    """
    retention = PodRetention(job.spec.pod_retention)
    if job.spec.template is None:
        return PodDeletion(0)
    token = planned.fencing_token
    if retention is PodRetention.NONE and token and planned.phase in _FINISHED:
        # Finished (now or earlier): the last attempt's pod goes too. Asked
        # again on every reconcile of a finished job: a delete that failed
        # is retried, and a job finished before it was set is cleaned up.
        return PodDeletion(max(fenced_below, token + 1))
    if retention is not PodRetention.ALL:
        return PodDeletion(fenced_below)
    completed = frozenset(
        a.fencing_token for a in planned.attempt_history or [] if a.reason in _COMPLETED
    )
    return PodDeletion(fenced_below, keep_ended=True, keep_tokens=completed)
