"""Failure rules, disruptions and lost leases, on a real control plane.

Each test runs its own ``leasehold operator`` process watching the test's
namespace; pods run as local processes through the pod runner. The rules
tested are written down in docs/lifecycle.md, "Failure rules and disruptions".
"""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold.lease.api import LeaseMode
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, LeaseStore, Rejected
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    condition,
    create_job,
    end_reason,
    events,
    phase_is,
    status,
    wait_for,
)
from tests.integration.leases import refused_lease_patch


def on_token(first: str, then: str) -> str:
    """A worker command: ``first`` under fencing token 1, ``then`` under any later one."""
    script = f'if [ "$LEASEHOLD_FENCING_TOKEN" = 1 ]; then {first}; else {then}; fi'
    return f"exec leasehold run -- sh -c '{script}'"


def rules(*rule: dict[str, Any]) -> dict[str, Any]:
    return {"rules": list(rule)}


def exit_codes(action: str, operator: str, *values: int, **kw: Any) -> dict[str, Any]:
    return {"action": action, "onExitCodes": {"operator": operator, "values": list(values), **kw}}


def test_an_exit_code_rule_fails_the_job_at_once(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "fatal",
        "exec leasehold run -- sh -c 'exit 42'",
        backoffLimit=3,
        backoff={"initialDelaySeconds": 1},
        podFailurePolicy=rules(exit_codes("FailJob", "In", 42, containerName="worker")),
    )
    wait_for("Failed", phase_is(api_client, namespace, "fatal", "Failed"), 60)
    st = status(api_client, namespace, "fatal")
    failed = condition(st, "Failed")
    assert failed["reason"] == "PodFailurePolicy"
    assert (
        "container worker exited with code 42, matching the FailJob rule at index 0"
        in (failed["message"])
    )
    assert [(a["fencingToken"], a["reason"], a["exitCode"]) for a in st["attemptHistory"]] == [
        (1, "Failed", 42)
    ]
    assert st["attempts"] == 1  # backoffLimit=3 left unused: no retry
    events(api_client, namespace, "fatal", until=["PodFailurePolicy"])
    assert store.get(namespace, "fatal").record.fencing_token == 1


def test_an_ignored_exit_code_uses_no_budget(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # backoffLimit=0 and maxAttempts=1: only an uncounted attempt lets it retry.
    create_job(
        api_client,
        namespace,
        "forgiven",
        on_token("exit 3", "true"),
        max_attempts=1,
        podFailurePolicy=rules(exit_codes("Ignore", "In", 3), exit_codes("FailJob", "NotIn", 0)),
    )
    wait_for("Succeeded", phase_is(api_client, namespace, "forgiven", "Succeeded"), 60)
    st = status(api_client, namespace, "forgiven")
    assert [(a["fencingToken"], a["reason"], a["exitCode"]) for a in st["attemptHistory"]] == [
        (1, "Failed", 3),
        (2, "Succeeded", 0),
    ]
    assert st.get("failed", 0) == 0
    record = store.get(namespace, "forgiven").record
    assert (record.failures, record.uncounted_attempts, record.last_uncounted_token) == (0, 1, 1)
    assert record.max_fencing_token == 2
    events(api_client, namespace, "forgiven", until=["FailureIgnored"])


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (rules({"action": "FailJob"}), "exactly one of onExitCodes and onPodConditions"),
        (
            rules(exit_codes("FailJob", "In", 0, 1)),
            "0 cannot be used with the In operator",
        ),
        (rules(exit_codes("FailJob", "In", 3, 1)), "must be sorted"),
        (rules(exit_codes("FailJob", "In", 1, 1)), "spec.podFailurePolicy.rules[0].onExitCodes"),
        (rules(exit_codes("FailJob", "In", 256)), "spec.podFailurePolicy.rules[0].onExitCodes"),
        (rules(exit_codes("Retry", "In", 1)), "spec.podFailurePolicy.rules[0].action"),
        (rules(*[exit_codes("Count", "In", 1)] * 21), "spec.podFailurePolicy.rules"),
        (
            rules({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}] * 21}),
            "onPodConditions",
        ),
    ],
)
def test_failure_rules_are_validated_naming_the_field(
    api_client: client.ApiClient, namespace: str, policy: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        create_job(api_client, namespace, "bad", "true", podFailurePolicy=policy)
    assert refused.value.status == 422
    assert message in str(refused.value.body)


def test_the_api_server_excuses_an_attempt_once_and_only_unheld(
    store: LeaseStore, api_client: client.ApiClient, namespace: str
) -> None:
    refused = functools.partial(refused_lease_patch, api_client, namespace, "job")

    store.create(
        namespace,
        "job",
        job_name="job",
        lease_duration_seconds=60,
        max_fencing_token=1,
        job_uid="00000000-0000-0000-0000-0000000000a1",
        mode=LeaseMode.PULL,
    )
    assert isinstance(store.claim(namespace, "job", "job-1"), Accepted)
    assert "can only be lowered" in refused({"maxFencingToken": 2})
    held = {"uncountedAttempts": 1, "lastUncountedToken": 1, "maxFencingToken": 2}
    assert "spec.uncountedAttempts goes up by exactly one" in refused(held)
    assert isinstance(store.excuse(store.get(namespace, "job")), Rejected)  # held
    assert isinstance(store.release(namespace, "job", "job-1", 1), Accepted)
    excused = store.excuse(store.get(namespace, "job"))
    assert isinstance(excused, Accepted), excused
    record = excused.lease.record
    assert (record.uncounted_attempts, record.last_uncounted_token) == (1, 1)
    assert record.max_fencing_token == 2
    # Once per token, by the store and on the server.
    assert isinstance(store.excuse(store.get(namespace, "job")), Rejected)
    again = {"uncountedAttempts": 2, "lastUncountedToken": 1, "maxFencingToken": 3}
    assert "spec.uncountedAttempts goes up by exactly one" in refused(again)
    assert "spec.lastUncountedToken changes only" in refused({"lastUncountedToken": 5})
    # The raised cap is one more claim; a failure an Ignore rule matches is reopened uncounted.
    assert isinstance(store.claim(namespace, "job", "job-2"), Accepted)
    assert isinstance(store.complete(namespace, "job", "job-2", 2, Outcome.FAILED), Accepted)
    reopened = store.reopen(store.get(namespace, "job"), counted=False)
    assert isinstance(reopened, Accepted), reopened
    record = reopened.lease.record
    assert (record.failures, record.uncounted_attempts, record.max_fencing_token) == (0, 2, 3)
    assert record.last_failure is not None and record.last_failure.fencing_token == 2


def evict(api_client: client.ApiClient, namespace: str, pod: str) -> None:
    """POST an Eviction through the pods/eviction subresource (as kubectl drain does)."""
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    client.CoreV1Api(api_client).create_namespaced_pod_eviction(pod, namespace, eviction)


def test_an_eviction_is_not_counted(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # maxAttempts=1, backoffLimit=0: a counted end of attempt 1 would fail the job.
    create_job(
        api_client,
        namespace,
        "drained",
        on_token("sleep 60", "true"),
        max_attempts=1,
        lease_seconds=30,
    )
    wait_for("Running", phase_is(api_client, namespace, "drained", "Running"), 30)
    local_pod_runner.wait_for_pid(namespace, "drained-1", timeout=30)
    evict(api_client, namespace, "drained-1")
    wait_for("Succeeded", phase_is(api_client, namespace, "drained", "Succeeded"), 60)
    st = status(api_client, namespace, "drained")
    assert [(a["fencingToken"], a["reason"]) for a in st["attemptHistory"]] == [
        (1, "Evicted"),
        (2, "Succeeded"),
    ]
    assert st.get("failed", 0) == 0
    record = store.get(namespace, "drained").record
    assert (record.fencing_token, record.failures, record.uncounted_attempts) == (2, 0, 1)
    assert record.max_fencing_token == 2  # the excuse raised the cap by one
    told = events(
        api_client, namespace, "drained", until=[end_reason(api_client, namespace, "drained")]
    )
    messages = [m for r, m in told if r == "Evicted"]
    assert len(messages) == 1 and "DisruptionTarget=True" in messages[0], messages
    # The evicted attempt is fenced: its token is stale.
    late = store.complete(namespace, "drained", "drained-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected)


def test_a_lost_lease_is_a_reclaim_and_the_next_attempt_backs_off(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # Any non-zero exit fails the job, but for a lost lease's 75: that is a reclaim.
    # The delay bounds the wait for the exit below (the next renewal, up to 2 s,
    # its refusal, the command stopped, the pod's status): 11 s on a loaded machine.
    delay = 12
    create_job(
        api_client,
        namespace,
        "lost",
        on_token("sleep 60", "true"),
        lease_seconds=6,
        max_attempts=2,
        backoffLimit=1,
        backoff={"initialDelaySeconds": delay, "maxDelaySeconds": 60},
        podFailurePolicy=rules(exit_codes("FailJob", "NotIn", 0)),
    )
    wait_for("Running", phase_is(api_client, namespace, "lost", "Running"), 30)
    local_pod_runner.wait_for_pid(namespace, "lost-1", timeout=30)
    # Take the lease back as the operator does on expiry: the wrapper's next
    # renewal is refused, it stops the command and exits 75.
    assert isinstance(store.reclaim(store.get(namespace, "lost")), Accepted)
    reclaimed_at = time.monotonic()
    core = client.CoreV1Api(api_client)

    def exited_75() -> bool:
        assert store.get(namespace, "lost").record.fencing_token == 1, "claimed before the delay"
        pod: Any = core.read_namespaced_pod("lost-1", namespace)
        for state in pod.status.container_statuses or []:
            if state.state.terminated is not None:
                assert state.state.terminated.exit_code == 75
                return True
        return False

    wait_for("lost-1 to exit 75", exited_75, delay - 1)
    st = status(api_client, namespace, "lost")
    assert st["phase"] == "Pending"
    assert st["nextAttemptAfter"]
    assert condition(st, "Ready")["reason"] == "BackingOff"
    wait_for("attempt 2", lambda: store.get(namespace, "lost").record.fencing_token == 2, 30)
    waited = time.monotonic() - reclaimed_at
    assert delay - 1 <= waited <= delay + 10, f"attempt 2 claimed {waited:.2f}s after the reclaim"
    wait_for("Succeeded", phase_is(api_client, namespace, "lost", "Succeeded"), 60)
    st = status(api_client, namespace, "lost")
    assert [(a["fencingToken"], a["reason"]) for a in st["attemptHistory"]] == [
        (1, "Reclaimed"),
        (2, "Succeeded"),
    ]
    assert st.get("failed", 0) == 0
    record = store.get(namespace, "lost").record
    assert (record.failures, record.uncounted_attempts) == (0, 0)  # the reclaim budget
    told = events(api_client, namespace, "lost", until=[end_reason(api_client, namespace, "lost")])
    messages = [m for r, m in told if r == "BackingOff"]
    assert messages == [
        f"Attempt 1 ended without a completion (released or reclaimed); retrying in {delay}s"
        " (reclaim 1 of maxAttempts=2)."
    ]


@pytest.mark.parametrize("per_index", [None, 3], ids=["no-per-index-budget", "per-index-budget"])
def test_a_fail_job_rule_on_one_index_fails_the_whole_indexed_job(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
    per_index: int | None,
) -> None:
    # Issue 27, case 6. batch/v1: a FailJob rule fails the whole Job, reason
    # PodFailurePolicy, whether or not backoffLimitPerIndex is set. Index 1
    # exits 42 at once; index 0 would run for a minute.
    script = '[ "$JOB_COMPLETION_INDEX" = 1 ] && exit 42; sleep 60'
    extra: dict[str, Any] = {} if per_index is None else {"backoffLimitPerIndex": per_index}
    create_job(
        api_client,
        namespace,
        "shards",
        f"exec leasehold run -- sh -c '{script}'",
        lease_seconds=10,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
        backoffLimit=3,
        podFailurePolicy=rules(exit_codes("FailJob", "In", 42)),
        **extra,
    )
    wait_for("Failed", phase_is(api_client, namespace, "shards", "Failed"), 60)
    failed = condition(status(api_client, namespace, "shards"), "Failed")
    assert failed["reason"] == "PodFailurePolicy", failed
    assert failed["message"].startswith("Index 1: "), failed["message"]
    assert "matching the FailJob rule at index 0" in failed["message"]


def test_a_fail_index_rule_fails_only_its_index(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    script = '[ "$JOB_COMPLETION_INDEX" = 1 ] && exit 42; exit 0'
    create_job(
        api_client,
        namespace,
        "shards",
        f"exec leasehold run -- sh -c '{script}'",
        lease_seconds=10,
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        backoffLimitPerIndex=3,
        podFailurePolicy=rules(exit_codes("FailIndex", "In", 42)),
    )
    wait_for("Failed", phase_is(api_client, namespace, "shards", "Failed"), 60)
    st = status(api_client, namespace, "shards")
    assert (st["completedIndexes"], st["failedIndexes"]) == ("0,2", "1")
    assert condition(st, "Failed")["reason"] == "FailedIndexes"
    assert st["attempts"] == 3  # index 1's budget of 3 retries left unused
    events(api_client, namespace, "shards", until=["FailIndex"])


def test_the_crd_refuses_fail_index_without_a_per_index_budget(
    api_client: client.ApiClient, namespace: str
) -> None:
    with pytest.raises(ApiException) as refused:
        create_job(
            api_client,
            namespace,
            "bad",
            "true",
            completions=2,
            completionMode="Indexed",
            podFailurePolicy=rules(exit_codes("FailIndex", "In", 42)),
        )
    assert refused.value.status == 422
    assert "the FailIndex action needs spec.backoffLimitPerIndex" in str(refused.value.body)


def test_a_pod_the_job_does_not_control_tells_nothing_of_its_attempts(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # Issue 27, case 13: pod facts came from any pod with the job's labels. A
    # pod someone else made, labelled like attempt 1 and marked disrupted, made
    # attempt 1's failure an uncounted eviction: the job retried past its budget.
    core = client.CoreV1Api(api_client)
    fake: dict[str, Any] = {
        "metadata": {
            "name": "z-not-the-jobs",
            "labels": {"leasehold.dev/job": "strict", "leasehold.dev/fencing-token": "1"},
        },
        "spec": {
            "schedulingGates": [{"name": "tests.leasehold.dev/never"}],  # never scheduled, run
            "containers": [{"name": "worker", "image": "local", "command": ["true"]}],
        },
    }
    core.create_namespaced_pod(namespace, cast(Any, fake))
    core.patch_namespaced_pod_status(
        "z-not-the-jobs",
        namespace,
        {
            "status": {
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "EvictionByEvictionAPI",
                        # Without it, the disruption controller takes the condition
                        # for stale (not followed by a deletion) and clears it.
                        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }
                ]
            }
        },
    )
    pod_status = core.read_namespaced_pod_status("z-not-the-jobs", namespace).status
    conditions = [(c.type, c.status) for c in (pod_status.conditions if pod_status else None) or []]
    assert ("DisruptionTarget", "True") in conditions, conditions
    create_job(
        api_client,
        namespace,
        "strict",
        "exec leasehold run -- sh -c 'exit 3'",
        max_attempts=1,
    )
    wait_for("Failed", phase_is(api_client, namespace, "strict", "Failed"), 60)
    time.sleep(2.0)  # a wrongly excused attempt would be claimed again at once
    record = store.get(namespace, "strict").record
    assert (record.fencing_token, record.uncounted_attempts) == (1, 0), record
    ended = end_reason(api_client, namespace, "strict")
    assert "Evicted" not in [r for r, _ in events(api_client, namespace, "strict", until=[ended])]
    # Nor is that pod the operator's to delete as a fenced-off attempt pod.
    core.read_namespaced_pod("z-not-the-jobs", namespace)
