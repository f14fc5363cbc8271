"""Attempt history, retries with backoff, and cancel, on a real control plane.

Each test runs its own ``leasehold operator`` process watching the test's
namespace; pods run as local processes through the pod runner. The rules
tested are written down in docs/lifecycle.md, "Attempts, retries and cancel".
"""

from __future__ import annotations

import functools
import shlex
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold.lease.api import LeaseMode
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, LeaseStore, Rejected
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    NO_BACKOFF,
    condition,
    create_job,
    events,
    patch_spec,
    phase_is,
    run,
    status,
    wait_for,
)
from tests.integration.leases import refused_lease_patch


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
    # Attempt 2 must keep its lease: a 4 s lease is a 3 s window (2 s was 1 s).
    create_job(api_client, namespace, "story", command, lease_seconds=4, backoff=NO_BACKOFF)
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
    events(api_client, namespace, "stopme", until=["Cancelled"])
    assert store.get(namespace, "stopme").record.completion is None  # nothing completed
    with pytest.raises(ApiException) as refused:
        patch_spec(api_client, namespace, "stopme", {"cancel": False})
    assert refused.value.status == 422
    assert "spec.cancel cannot be undone" in str(refused.value.body)


def test_failure_is_retried_after_the_backoff_then_succeeds(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    delay = 3
    command = on_token("exec leasehold run -- sh -c 'exit 3'", "exec leasehold run -- true")
    backoff = {"initialDelaySeconds": delay, "factor": 2, "maxDelaySeconds": 60}
    create_job(api_client, namespace, "flaky", command, backoffLimit=2, backoff=backoff)
    seen: dict[str, float] = {}

    def retried() -> bool:
        try:
            record = store.get(namespace, "flaky").record
        except LeaseNotFoundError:
            return False
        failure = record.completion or record.last_failure
        if failure is not None and failure.fencing_token == 1:
            seen.setdefault("failed", time.monotonic())
        if record.fencing_token == 2:
            seen["claimed"] = time.monotonic()
            return True
        return False

    wait_for("attempt 1 to fail", lambda: retried() or "failed" in seen, 30)
    backing_off = status(api_client, namespace, "flaky")
    wait_for("attempt 2", retried, 30)
    waited = seen["claimed"] - seen["failed"]
    assert delay - 0.2 <= waited <= delay + 5, f"attempt 2 claimed {waited:.2f}s after the failure"
    assert backing_off["phase"] == "Pending" or backing_off.get("attemptHistory")
    wait_for("Succeeded", phase_is(api_client, namespace, "flaky", "Succeeded"), 60)
    st = status(api_client, namespace, "flaky")
    assert st["completion"]["fencingToken"] == 2
    assert st["failed"] == 1
    assert [(a["fencingToken"], a["reason"], a.get("exitCode")) for a in st["attemptHistory"]] == [
        (1, "Failed", 3),
        (2, "Succeeded", 0),
    ]
    told = events(api_client, namespace, "flaky", until=["BackingOff", "Completed"])
    messages = [m for r, m in told if r == "BackingOff"]
    assert messages == [
        f"Attempt 1 failed (exit code 3); retrying in {delay}s (failure 1 of backoffLimit=2)."
    ]
    record = store.get(namespace, "flaky").record
    assert record.failures == 1
    assert record.last_failure is not None
    assert record.last_failure.exit_code == 3
    # The failed worker's late completion carries a stale token.
    late = store.complete(namespace, "flaky", "flaky-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected)


def test_backoff_is_visible_in_status_while_waiting(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    backoff = {"initialDelaySeconds": 30, "maxDelaySeconds": 30}
    create_job(
        api_client,
        namespace,
        "wait",
        "exec leasehold run -- false",
        backoffLimit=1,
        backoff=backoff,
    )

    def waiting() -> dict[str, Any] | None:
        st = status(api_client, namespace, "wait")
        return st if st.get("nextAttemptAfter") else None

    st = wait_for("nextAttemptAfter", waiting, 30)
    assert st["phase"] == "Pending"
    assert condition(st, "Ready")["reason"] == "BackingOff"
    assert st["lastAttemptReason"] == "Failed"
    assert st["attempts"] == 1
    time.sleep(2)  # nothing starts before the delay
    assert status(api_client, namespace, "wait")["attempts"] == 1


def test_backoff_limit_used_up_fails_the_job(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    backoff = {"initialDelaySeconds": 1, "maxDelaySeconds": 1}
    create_job(
        api_client,
        namespace,
        "broken",
        "exec leasehold run -- false",
        backoffLimit=1,
        backoff=backoff,
    )
    wait_for("Failed", phase_is(api_client, namespace, "broken", "Failed"), 60)
    st = status(api_client, namespace, "broken")
    assert condition(st, "Failed")["reason"] == "BackoffLimitExceeded"
    assert [(a["fencingToken"], a["reason"]) for a in st["attemptHistory"]] == [
        (1, "Failed"),
        (2, "Failed"),
    ]
    assert st["failed"] == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"backoffLimit": -1}, "spec.backoffLimit"),
        ({"backoffLimit": 101}, "spec.backoffLimit"),
        (
            {"backoff": {"initialDelaySeconds": 20, "maxDelaySeconds": 10}},
            "spec.backoff.maxDelaySeconds must be at least",
        ),
        ({"backoff": {"factor": 0.5}}, "spec.backoff.factor"),
    ],
)
def test_retry_fields_are_validated(
    api_client: client.ApiClient, namespace: str, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        create_job(api_client, namespace, "bad", "true", **spec)
    assert refused.value.status == 422
    assert message in str(refused.value.body)


def test_backoff_limit_cannot_be_edited(api_client: client.ApiClient, namespace: str) -> None:
    create_job(api_client, namespace, "fixed", "true", backoffLimit=1)
    with pytest.raises(ApiException) as refused:
        patch_spec(api_client, namespace, "fixed", {"backoffLimit": 5})
    assert refused.value.status == 422
    assert "spec.backoffLimit is immutable" in str(refused.value.body)


def test_the_api_server_allows_reopening_only_a_failure_and_counts_it(
    store: LeaseStore, api_client: client.ApiClient, namespace: str
) -> None:
    refused = functools.partial(refused_lease_patch, api_client, namespace, "job")

    uid_a, uid_b = "00000000-0000-0000-0000-0000000000a1", "00000000-0000-0000-0000-0000000000b1"
    store.create(
        namespace,
        "job",
        job_name="job",
        lease_duration_seconds=60,
        max_fencing_token=3,
        job_uid=uid_a,
        mode=LeaseMode.PULL,
    )
    assert isinstance(store.claim(namespace, "job", "job-1"), Accepted)
    assert isinstance(store.complete(namespace, "job", "job-1", 1, Outcome.FAILED), Accepted)
    assert "spec.failures goes up by exactly one" in refused({"failures": 3})
    reopened = store.reopen(store.get(namespace, "job"))
    assert isinstance(reopened, Accepted), reopened
    record = reopened.lease.record
    assert (record.completion, record.failures, record.fencing_token) == (None, 1, 1)
    assert record.last_failure is not None and record.last_failure.fencing_token == 1
    assert "spec.lastFailure changes only" in refused({"lastFailure": None})
    # The failed holder is fenced off; the next claim bumps the token.
    late = store.complete(namespace, "job", "job-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected)
    assert isinstance(store.claim(namespace, "job", "job-2"), Accepted)
    assert isinstance(store.complete(namespace, "job", "job-2", 2, Outcome.SUCCEEDED), Accepted)
    # A success is final: neither the store nor a hand-made write reopens it.
    done = store.get(namespace, "job")
    assert isinstance(store.reopen(done), Rejected)
    assert "recorded once" in refused({"completion": None, "failures": 2})
    # A new incarnation starts with no failures.
    taken = store.rearm(
        done, job_uid=uid_b, mode=LeaseMode.PULL, lease_duration_seconds=60, max_attempts=3
    )
    assert isinstance(taken, Accepted), taken
    assert (taken.lease.record.failures, taken.lease.record.last_failure) == (0, None)
