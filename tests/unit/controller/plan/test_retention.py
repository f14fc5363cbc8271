"""spec.podRetention: which fenced-off attempts' pods are deleted (pure)."""

from __future__ import annotations

from leasehold.controller.plan.retention import (
    PodDeletion,
    index_pods_to_delete,
    pod_deletion,
    stale_pods,
)
from leasehold.lease.api import AttemptRecord, LeasedJobStatus, Phase
from tests.unit.controller.plan.test_single import job


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


def _pod(
    name: str,
    token: str | None,
    *,
    phase: str = "Running",
    index: str | None = None,
    owner: str | None = "u-1",
    deleting: bool = False,
) -> dict[str, object]:
    labels = {"leasehold.dev/job": "hello"}
    if token is not None:
        labels["leasehold.dev/fencing-token"] = token
    if index is not None:
        labels["leasehold.dev/completion-index"] = index
    meta: dict[str, object] = {"name": name, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "LeasedJob", "uid": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_stale_pods_are_those_below_the_token_but_the_kept_and_the_going() -> None:
    pods = [
        _pod("hello-1", "1"),
        _pod("hello-2", "2", phase="Succeeded"),
        _pod("hello-3", "3"),
        _pod("hello-4", "4"),
        _pod("hello-x", "x"),  # no readable token: never chosen
        _pod("hello-0", None),  # no token label: counts as 0
        _pod("hello-5", "1", deleting=True),
        _pod("other-1", "1", owner="u-2"),
        _pod("foreign-1", "1", owner=None),  # labelled like an attempt, no LeasedJob's: never
    ]
    assert stale_pods(pods, PodDeletion(4)) == [
        "hello-1",
        "hello-2",
        "hello-3",
        "hello-0",
        "other-1",
    ]
    kept = PodDeletion(4, keep_ended=True, keep_tokens=frozenset({3}))
    assert stale_pods(pods, kept) == ["hello-1", "hello-0", "other-1"]
    assert stale_pods(pods, PodDeletion(4), owner_uid="u-1") == [
        "hello-1",
        "hello-2",
        "hello-3",
        "hello-0",
    ]
    assert stale_pods(pods, PodDeletion(0)) == []


def test_index_pods_to_delete_spare_the_kept_attempts_and_unreadable_tokens() -> None:
    pods = [
        _pod("a-0-1", "1", index="0"),
        _pod("a-0-2", "2", index="0", phase="Failed"),
        _pod("a-1-1", "1", index="1"),
        _pod("a-1-x", "x", index="1"),
        _pod("z-0-1", "1", index="0", owner=None),  # no LeasedJob's pod: never
    ]
    every = index_pods_to_delete(pods, below_token=None)
    assert every == ["a-0-1", "a-0-2", "a-1-1", "a-1-x"]
    assert index_pods_to_delete(pods, below_token=2) == ["a-0-1", "a-1-1"]
    spared = index_pods_to_delete(pods, below_token=None, keep_ended=True, keep=frozenset({(1, 1)}))
    assert spared == ["a-0-1", "a-1-x"]
