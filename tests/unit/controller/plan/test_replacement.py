"""``podReplacementPolicy``, the ready/terminating counts and the index failure-count annotations.

Pure: the planner's wait for earlier pods (``plan/replacement.py``, ``plan/single.py``),
the pod memory's counts (``engines/pods.py``) and ``build_pod``'s annotations.
"""

from __future__ import annotations

from typing import Any

from leasehold import names
from leasehold.controller.engines.pods import PodCounts, PodMemory
from leasehold.controller.plan import replacement
from leasehold.controller.plan import single as reconcile
from leasehold.controller.plan.failure_policy import PodFacts
from leasehold.controller.plan.pod import build_pod
from leasehold.controller.plan.single import Action
from leasehold.lease.api import PodReplacementPolicy
from tests.unit.controller.plan.test_single import NOW, job, lease

RULES = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}]}


def facts(phase: str = "Running", **kw: Any) -> PodFacts:
    return PodFacts(uid="p", node_name="n", exit_code=None, owner_uid="u-1", phase=phase, **kw)


def test_pod_replacement_policy_defaults_as_batch_v1() -> None:
    assert replacement.policy(job()) == PodReplacementPolicy.TERMINATING_OR_FAILED
    assert replacement.policy(job(podFailurePolicy=RULES)) == PodReplacementPolicy.FAILED
    assert replacement.policy(job(podReplacementPolicy="Failed")) == PodReplacementPolicy.FAILED
    assert not replacement.waits_for_terminal(job(False, podReplacementPolicy="Failed"))


def test_only_pods_not_terminal_below_the_next_token_are_in_the_way() -> None:
    pods = {
        1: facts("Failed"),
        2: facts(deleting=True),
        3: facts(gone=True),
        4: facts("Succeeded"),
        5: facts(),
    }
    failed = job(podReplacementPolicy="Failed")
    assert replacement.pods_in_the_way(failed, pods, 5) == [2]
    assert replacement.pods_in_the_way(failed, pods, 6) == [2, 5]
    assert replacement.pods_in_the_way(job(), pods, 6) == []
    assert not replacement.must_delete(pods, [2])
    assert replacement.must_delete(pods, [2, 5])


def plan_after_reclaim(spec: dict[str, Any], pods: dict[int, PodFacts]) -> reconcile.Plan:
    return reconcile.plan(
        job(backoff={"initialDelaySeconds": 0, "maxDelaySeconds": 0}, **spec),
        lease(1, max_fencing_token=3),
        now=NOW,
        pod_created_for_holder=False,
        last_reclaim_reason="LeaseExpired",
        pods=pods,
    )


def test_failed_policy_waits_for_the_reclaimed_pod_and_deletes_it() -> None:
    plan = plan_after_reclaim({"podReplacementPolicy": "Failed"}, {1: facts()})
    assert plan.action is Action.WAIT_FOR_PODS
    assert plan.delete_pods_below_token == 2
    assert [e.reason for e in plan.events] == [replacement.WAITING_FOR_POD_TERMINATION]
    held = next(c for c in plan.status.conditions or [] if c.type == "LeaseHeld")
    assert held.reason == replacement.WAITING_FOR_POD_TERMINATION
    assert "hello-1" in held.message
    # Already being deleted: nothing more to delete, still waiting.
    plan = plan_after_reclaim({"podReplacementPolicy": "Failed"}, {1: facts(deleting=True)})
    assert (plan.action, plan.delete_pods_below_token) == (Action.WAIT_FOR_PODS, 0)


def test_a_terminal_pod_or_the_default_policy_lets_the_next_attempt_claim() -> None:
    gone = plan_after_reclaim({"podReplacementPolicy": "Failed"}, {1: facts(gone=True)})
    assert gone.action is Action.CLAIM_AND_START
    default = plan_after_reclaim({}, {1: facts(deleting=True)})
    assert default.action is Action.CLAIM_AND_START


def pod_body(
    token: int, *, ready: bool, deleting: bool = False, phase: str = "Running"
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "namespace": "ns",
        "name": f"a-{token}",
        "labels": {names.LABEL_JOB: "a", names.LABEL_TOKEN: str(token)},
        "ownerReferences": [{"kind": "LeasedJob", "uid": "u-1", "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": meta, "status": {"phase": phase, "conditions": conditions}}


def test_pod_memory_counts_ready_and_terminating_pods_as_batch_v1() -> None:
    memory = PodMemory()
    assert not memory.observe(pod_body(1, ready=False, phase="Pending"))  # nothing counts yet
    assert memory.counts("ns", "a", owner_uid="u-1") is None  # no pod watch feeds it
    memory.fed = True
    assert memory.observe(pod_body(1, ready=True))
    assert not memory.observe(pod_body(1, ready=True))  # the same place in the counts
    assert memory.counts("ns", "a", owner_uid="u-1") == PodCounts(ready=1, terminating=0)
    assert memory.observe(pod_body(1, ready=True, deleting=True))  # no longer active
    assert memory.counts("ns", "a", owner_uid="u-1") == PodCounts(ready=0, terminating=1)
    assert memory.observe(pod_body(1, ready=True, deleting=True), gone=True)
    assert memory.counts("ns", "a", owner_uid="u-1") == PodCounts(ready=0, terminating=0)
    assert memory.counts("ns", "a", owner_uid="u-2") == PodCounts(ready=0, terminating=0)


def test_index_pods_carry_batch_failure_count_annotations() -> None:
    indexed = job(completions=2, completionMode="Indexed", backoffLimitPerIndex=2)
    kw: dict[str, Any] = {
        "namespace": "ns",
        "holder": "hello-1-3",
        "token": 3,
        "owner_uid": "u-1",
        "lease_duration_seconds": 10,
        "index": 1,
    }
    notes = build_pod(indexed, index_failures=(1, 0), **kw)["metadata"]["annotations"]
    assert notes[names.BATCH_ANNOTATION_INDEX_FAILURE_COUNT] == "1"
    assert names.BATCH_ANNOTATION_INDEX_IGNORED_FAILURE_COUNT not in notes
    notes = build_pod(indexed, index_failures=(1, 2), **kw)["metadata"]["annotations"]
    assert notes[names.BATCH_ANNOTATION_INDEX_IGNORED_FAILURE_COUNT] == "2"
    notes = build_pod(indexed, **kw)["metadata"]["annotations"]
    assert names.BATCH_ANNOTATION_INDEX_FAILURE_COUNT not in notes


def test_a_deletion_the_watch_missed_is_settled_by_a_list() -> None:
    memory = PodMemory()
    memory.fed = True
    memory.observe(pod_body(1, ready=True, deleting=True))
    memory.observe(pod_body(2, ready=True))
    memory.settle("ns", "a", None, present={2})  # the list no longer returns pod 1
    assert memory.counts("ns", "a", owner_uid="u-1") == PodCounts(ready=1, terminating=0)
    memory.settle("ns", "a", None, present=set())  # pod 2 was not being deleted: kept
    assert memory.counts("ns", "a", owner_uid="u-1") == PodCounts(ready=1, terminating=0)
