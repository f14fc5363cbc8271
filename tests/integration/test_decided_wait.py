"""A decided job waits for its pods from the pod watch's memory, not a LIST per poll.

Issue 29: on kind at 200 jobs the operator LISTed a job's pods 5.9 times per
job, nearly all while a decided job waited for its pods to terminate (its
1 s poll listed each time). The pods are listed once at the decision; the
pod watch's memory counts them after that (a pod that ends triggers the
reconcile), with a list again every ``RELIST_SECONDS``. The wait itself is
batch/v1's and must stay: the final condition only once the pod is gone.
Requests are counted from the operator's own request log (urllib3 logs each
request it sends at DEBUG), between its ``decided`` and ``finished`` lines.
"""

from __future__ import annotations

import re

import pytest
from kubernetes import client

from leasehold.controller.act.terminal import RELIST_SECONDS
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    condition,
    condition_true,
    create_job,
    patch_spec,
    phase_is,
    status,
    transition_time,
    wait_for,
)

GRACE_SECONDS = 8
"""The pod's termination grace period: how long the decided job waits (it ignores SIGTERM)."""


@pytest.fixture
def operator_env() -> dict[str, str]:
    """The operator logs every request it sends (urllib3 at DEBUG)."""
    return {"LEASEHOLD_LOG_LEVEL": "DEBUG"}


def test_a_decided_job_waits_for_its_pod_without_listing_pods_each_poll(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """Cancelled with its pod ignoring SIGTERM: ``Failed`` only once the pod is gone, one LIST.

    On main before this change the wait listed the job's pods on each 1 s
    poll (7-9 LISTs over an 8 s grace period).
    """
    assert GRACE_SECONDS < RELIST_SECONDS  # so the wait needs no list but the decision's
    template = {
        "spec": {
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "containers": [
                {
                    "name": "worker",
                    "image": "local",
                    "command": ["sh", "-c", "trap '' TERM; sleep 120"],
                }
            ],
        }
    }
    create_job(api_client, namespace, "slow", None, lease_seconds=60, template=template)
    local_pod_runner.wait_for_pid(namespace, "slow-1", timeout=30)
    patch_spec(api_client, namespace, "slow", {"cancel": True})
    wait_for(
        "FailureTarget",
        lambda: condition_true(api_client, namespace, "slow", "FailureTarget"),
        30,
    )
    wait_for("Failed", phase_is(api_client, namespace, "slow", "Failed"), GRACE_SECONDS + 30)
    # batch/v1's wait held: Failed came once the pod was killed, at its grace period's end.
    st = status(api_client, namespace, "slow")
    waited = (
        transition_time(condition(st, "Failed")) - transition_time(condition(st, "FailureTarget"))
    ).total_seconds()
    assert waited >= GRACE_SECONDS - 2, f"Failed {waited:.0f}s after FailureTarget"
    assert local_pod_runner.wait_for_exit(namespace, "slow-1", timeout=5) != 0

    log = operator.logs()
    finished = log.index(f"{namespace}/slow: finished (Failed)")
    # The last decision before it: a status write refused (409) decides again.
    decided = log.rindex(f"{namespace}/slow: decided (Failed)", 0, finished)
    pod_list = re.compile(rf'"GET /api/v1/namespaces/{namespace}/pods\?[^ "]*labelSelector=')
    # The pattern matches this log's request lines: the decision itself listed.
    assert pod_list.findall(log[:decided]), "no pod LIST logged at all: the count proves nothing"
    lists = pod_list.findall(log[decided:finished])
    assert len(lists) <= 1, f"{len(lists)} pod LISTs while the decided job waited for its pod"
