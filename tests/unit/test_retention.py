"""spec.podRetention: which fenced-off attempts' pods are deleted (pure)."""

from __future__ import annotations

from leasehold.controller.plan.retention import PodDeletion, pod_deletion
from leasehold.lease.api import AttemptRecord, LeasedJobStatus, Phase
from tests.unit.test_reconcile import job


def _status(phase: Phase, token: int = 3) -> LeasedJobStatus:
    history = [
        AttemptRecord(fencing_token=1, pod_name="hello-1", reason="Reclaimed"),
        AttemptRecord(fencing_token=2, pod_name="hello-2", reason="Failed"),
        AttemptRecord(fencing_token=3, pod_name="hello-3"),
    ]
    return LeasedJobStatus(phase=phase, fencing_token=token, attempt_history=history)


def test_last_deletes_what_the_planner_fenced_off_and_keeps_the_last() -> None:
    assert pod_deletion(job(), _status(Phase.RUNNING), 3) == PodDeletion(3)
    assert pod_deletion(job(), _status(Phase.SUCCEEDED), 0) == PodDeletion(0)


def test_none_deletes_the_last_pod_once_finished() -> None:
    none = job(podRetention="None")
    assert pod_deletion(none, _status(Phase.SUCCEEDED), 0) == PodDeletion(4)
    assert pod_deletion(none, _status(Phase.FAILED), 0) == PodDeletion(4)
    assert pod_deletion(none, _status(Phase.RUNNING), 3) == PodDeletion(3)


def test_all_keeps_ended_pods_and_completed_attempts() -> None:
    kept = pod_deletion(job(podRetention="All"), _status(Phase.RUNNING), 3)
    assert kept == PodDeletion(3, keep_ended=True, keep_tokens=frozenset({2}))


def test_pull_mode_has_no_pods() -> None:
    assert pod_deletion(job(template=False), _status(Phase.SUCCEEDED), 0) == PodDeletion(0)
