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

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from leasehold import names
from leasehold.lease.api import AttemptReason, LeasedJob, LeasedJobStatus, Phase, PodRetention

_FINISHED = (Phase.SUCCEEDED, Phase.FAILED)
_COMPLETED = (AttemptReason.SUCCEEDED, AttemptReason.FAILED)
_ENDED = ("Succeeded", "Failed")
"""Phases of a pod whose containers all ended."""


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


def _live(pod: Mapping[str, Any], keep_ended: bool) -> bool:
    """Whether a listed pod may be deleted at all: not being deleted, not spared as ended."""
    meta = pod.get("metadata") or {}
    if not meta.get("name") or meta.get("deletionTimestamp") is not None:
        return False
    phase = (pod.get("status") or {}).get("phase")
    return not (keep_ended and phase in _ENDED)


def stale_pods(
    pods: Iterable[Mapping[str, Any]],
    deletion: PodDeletion,
    *,
    owner_uid: str | None = None,
) -> list[str]:
    """The names of a single job's listed pods that ``deletion`` fences off.

    Args:
        pods: the job's pods as listed (JSON).
        deletion: which tokens go, and what is spared.
        owner_uid: only pods owned by this job incarnation (``None``: any).

    Returns:
        Pod names, in list order: those below the token, not being deleted,
        neither spared nor another incarnation's. A pod without a readable
        token label, or that no LeasedJob controls (someone else's pod with
        the job's labels), is never chosen.
    """
    out: list[str] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not _live(pod, deletion.keep_ended):
            continue
        refs = meta.get("ownerReferences") or []
        if not _attempt_pod(pod):
            continue  # someone else's pod with the job's labels: not ours to delete
        if owner_uid is not None and not any(ref.get("uid") == owner_uid for ref in refs):
            continue  # another incarnation's pod
        try:
            token = int((meta.get("labels") or {}).get(names.LABEL_TOKEN, "0"))
        except ValueError:
            continue
        if token >= deletion.below_token or token in deletion.keep_tokens:
            continue
        out.append(str(meta["name"]))
    return out


def _attempt_pod(pod: Mapping[str, Any]) -> bool:
    """Whether a LeasedJob controls the pod (an attempt pod the operator made)."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("kind") == "LeasedJob" and ref.get("controller") for ref in refs)


def index_pods_to_delete(
    pods: Iterable[Mapping[str, Any]],
    *,
    below_token: int | None,
    keep_ended: bool = False,
    keep: frozenset[tuple[int, int]] = frozenset(),
) -> list[str]:
    """The names of an Indexed job's listed pods to delete (of one index, or all).

    Args:
        pods: the pods as listed (JSON): one index's, or the whole job's.
        below_token: only pods whose token is lower (``None``: any token).
        keep_ended: spare the pods that ended (Succeeded, Failed).
        keep: spare the pods of these ``(index, token)`` attempts.

    Returns:
        Pod names, in list order; never a pod no LeasedJob controls.
    """
    kept = {(str(i), str(t)) for i, t in keep}
    out: list[str] = []
    for pod in pods:
        if not _live(pod, keep_ended) or not _attempt_pod(pod):
            continue
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        token = str(labels.get(names.LABEL_TOKEN, ""))
        if (str(labels.get(names.LABEL_COMPLETION_INDEX, "")), token) in kept:
            continue
        if below_token is not None and (not token.isdigit() or int(token) >= below_token):
            continue
        out.append(str(meta["name"]))
    return out
