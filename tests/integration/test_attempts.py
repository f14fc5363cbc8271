"""Attempt history, retries with backoff, and cancel, on a real control plane.

Each test runs its own ``leasehold operator`` process watching the test's
namespace; pods run as local processes through the pod runner. The rules
tested are written down in docs/architecture.md, "Attempts, retries and cancel".
"""

from __future__ import annotations

import shlex
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold.lease.protocol import Outcome
from leasehold.lease.store import LeaseStore, Rejected
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.test_lifecycle import patch_spec
from tests.integration.test_operator import (
    condition,
    create_job,
    events,
    phase_is,
    run,
    status,
    wait_for,
)


@pytest.fixture
def store(api_client: client.ApiClient) -> LeaseStore:
    return LeaseStore(api_client)


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


def test_cancel_fences_the_running_attempt_at_once(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(api_client, namespace, "stopme", run(120), lease_seconds=30)
    wait_for("Running", phase_is(api_client, namespace, "stopme", "Running"), 30)
    local_pod_runner.wait_for_pid(namespace, "stopme-1", timeout=30)
    patch_spec(api_client, namespace, "stopme", {"cancel": True})
    cancelled_at = time.monotonic()
    # Fenced at once: the lease is unheld and capped at token 1 long before the
    # 30 s lease would expire (and whatever the pod still does).
    wait_for("lease stopped", lambda: store.get(namespace, "stopme").record.holder_identity is None)
    assert time.monotonic() - cancelled_at < 10
    record = store.get(namespace, "stopme").record
    assert (record.fencing_token, record.max_fencing_token) == (1, 1)
    late = store.complete(namespace, "stopme", "stopme-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected)
    wait_for("Failed", phase_is(api_client, namespace, "stopme", "Failed"), 30)
    st = status(api_client, namespace, "stopme")
    assert condition(st, "Failed")["reason"] == "Cancelled"
    assert st["attemptHistory"][-1]["reason"] == "Cancelled"
    assert st["lastAttemptReason"] == "Cancelled"
    assert "Cancelled" in [r for r, _ in events(api_client, namespace, "stopme")]
    assert store.get(namespace, "stopme").record.completion is None  # nothing completed
    with pytest.raises(ApiException) as refused:
        patch_spec(api_client, namespace, "stopme", {"cancel": False})
    assert refused.value.status == 422
    assert "spec.cancel cannot be undone" in str(refused.value.body)
