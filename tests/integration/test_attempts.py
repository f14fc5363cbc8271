"""Attempt history, retries with backoff, and cancel, on a real control plane.

Each test runs its own ``leasehold operator`` process watching the test's
namespace; pods run as local processes through the pod runner. The rules
tested are written down in docs/architecture.md, "Attempts, retries and cancel".
"""

from __future__ import annotations

import shlex

from kubernetes import client

from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.test_operator import create_job, phase_is, status, wait_for


def on_token(first: str, then: str) -> str:
    """A worker command: ``first`` under fencing token 1, ``then`` under any later one."""
    script = f'if [ "$LEASEHOLD_FENCING_TOKEN" = 1 ]; then {first}; else {then}; fi'
    return f"sh -c {shlex.quote(script)}"


def test_history_records_each_attempt(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    # Attempt 1 never renews (no `leasehold run`): reclaimed once its pod runs.
    command = on_token("exec sleep 60", "exec leasehold run -- true")
    create_job(api_client, namespace, "story", command, lease_seconds=2)
    wait_for("Succeeded", phase_is(api_client, namespace, "story", "Succeeded"), 60)
    st = status(api_client, namespace, "story")
    history = st["attemptHistory"]
    assert [(a["fencingToken"], a["podName"], a["reason"]) for a in history] == [
        (1, "story-1", "Reclaimed"),
        (2, "story-2", "Succeeded"),
    ]
    assert history[1]["exitCode"] == 0
    assert "exitCode" not in history[0]  # still running when reclaimed: not known
    for attempt in history:
        assert attempt["nodeName"] == local_pod_runner.node_name
        assert attempt["podUID"]
        assert attempt["startTime"] <= attempt["endTime"]
    assert st["lastAttemptReason"] == "Succeeded"
    pod = client.CoreV1Api(api_client).read_namespaced_pod("story-2", namespace)
    assert pod.metadata is not None
    assert history[1]["podUID"] == pod.metadata.uid
