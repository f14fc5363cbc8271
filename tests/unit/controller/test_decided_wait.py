"""When a decided job's wait for its pods lists them, and when the pod watch's memory counts them.

The pods edge here is a recorder (the unit under test is the choice of a
list or the memory, on a stepped clock); the wait against a real API server
and pod runner is ``tests/integration/test_decided_wait.py``.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from leasehold import names
from leasehold.controller.act import terminal
from leasehold.controller.act.attempts import Attempts
from leasehold.controller.act.context import Context
from leasehold.controller.plan.terminal import Terminal
from leasehold.lease.api import LeasedJob, LeasedJobStatus
from leasehold.lease.errors import TransientStoreError
from tests.unit.controller import attempt_pods

UID = "job-uid"


class RecordedPods:
    """The pods edge's ``list``: answers what the test put, counts the calls, may fail once."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.lists = 0
        self.fail_next = False

    def list(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        assert (namespace, label_selector) == ("ns", f"{names.LABEL_JOB}=slow")
        self.lists += 1
        if self.fail_next:
            self.fail_next = False
            raise TransientStoreError("429: too many requests")
        return [dict(p) for p in self.pods]


def attempt_pod(phase: str, token: int = 1) -> dict[str, Any]:
    """The job ``slow``'s pod under ``token``."""
    return attempt_pods.attempt_pod("slow", token, phase, uid=f"pod-{token}", owner=UID)


def decided_job() -> tuple[LeasedJob, dict[str, Any], LeasedJobStatus]:
    body: dict[str, Any] = {
        "metadata": {"name": "slow", "namespace": "ns", "uid": UID, "generation": 1},
        "spec": {
            "leaseDurationSeconds": 10,
            "template": {"spec": {"containers": [{"name": "w", "image": "busybox"}]}},
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "Cancelled",
                    "lastTransitionTime": "2026-12-05T17:00:00Z",
                }
            ],
        },
    }
    job = LeasedJob.model_validate(body)
    assert job.status is not None
    return job, body, job.status


@pytest.fixture
def clock() -> list[float]:
    return [100.0]


@pytest.fixture
def pods() -> RecordedPods:
    return RecordedPods()


@pytest.fixture
def ctx(clock: list[float], pods: RecordedPods) -> Context:
    none = cast(Any, None)
    context = Context(store=none, pods=cast(Any, pods), jobs=none, events=none)
    context.monotonic = lambda: clock[0]
    context.pod_memory.fed = True
    return context


def settle(ctx: Context) -> Terminal:
    job, body, status = decided_job()
    return terminal.settle(ctx, Attempts(ctx), job, body, status)


def finished_after(ctx: Context, clock: list[float], seconds: float) -> bool:
    """Whether the job's wait ends at a poll ``seconds`` after the last one."""
    clock[0] += seconds
    return settle(ctx).finished


def test_the_pods_are_listed_at_the_decision_then_counted_from_the_watch(
    ctx: Context, clock: list[float], pods: RecordedPods
) -> None:
    pods.pods = [attempt_pod("Running")]
    assert not settle(ctx).finished
    assert pods.lists == 1
    assert not finished_after(ctx, clock, 5)  # the 1 s polls meanwhile: the memory, no request
    assert pods.lists == 1
    ctx.pod_memory.observe(attempt_pod("Failed"))  # the pod watch's event
    assert finished_after(ctx, clock, 1)
    assert pods.lists == 1


def test_a_deletion_the_watch_missed_is_mended_by_the_next_list(
    ctx: Context, clock: list[float], pods: RecordedPods
) -> None:
    second = attempt_pod("Running", token=2)
    pods.pods = [attempt_pod("Running"), second]
    assert not settle(ctx).finished
    pods.pods = [second]  # the first deleted; the watch never told
    assert not finished_after(ctx, clock, terminal.RELIST_SECONDS - 1)
    assert pods.lists == 1
    assert not finished_after(ctx, clock, 1)  # listed again: the second still runs
    assert pods.lists == 2
    ctx.pod_memory.observe(attempt_pod("Succeeded", token=2))  # its event
    # The memory knows the first is gone (the list did not return it): done.
    assert finished_after(ctx, clock, 1)
    assert pods.lists == 2


def test_a_failed_first_list_is_made_again_not_answered_from_an_empty_memory(
    ctx: Context, clock: list[float], pods: RecordedPods
) -> None:
    # An operator just restarted: its pod watch has not delivered the pod yet,
    # and the decision's list fails. The retry must list, not count 0 from memory.
    pods.pods = [attempt_pod("Running")]
    pods.fail_next = True
    with pytest.raises(TransientStoreError):
        settle(ctx)
    assert not finished_after(ctx, clock, 1)
    assert pods.lists == 2


def test_a_job_with_a_disowned_pod_is_counted_by_listing(
    ctx: Context, clock: list[float], pods: RecordedPods
) -> None:
    # A pod whose claim was lost: the memory drops it, batch/v1 would wait for it.
    lost = attempt_pod("Running", token=2)
    pods.pods = [attempt_pod("Failed"), lost]
    ctx.pod_memory.disown(lost)
    assert not settle(ctx).finished
    assert not finished_after(ctx, clock, 1)
    assert pods.lists == 2  # listed again: the memory cannot count it
    pods.pods = [attempt_pod("Failed")]
    assert finished_after(ctx, clock, 1)
