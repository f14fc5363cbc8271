"""``spec.successPolicy`` and batch/v1's interim conditions on a real control plane.

Named after the batch/v1 e2e tests they mirror (test/e2e/apps/job.go in
kubernetes/kubernetes: "with successPolicy ..."), translated to LeasedJob:
an Indexed job meets a rule, gets ``SuccessCriteriaMet`` then ``Complete``
(reason ``SuccessPolicy``), and the indexes still running are stopped at the
store (fenced), their pods deleted. The interim ``FailureTarget`` comes
before ``Failed`` while a stopped pod still terminates. Pods run as local
processes (the pod runner).
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import LeaseStore, Rejected
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    G,
    V,
    condition,
    condition_true,
    create_job,
    events,
    patch_spec,
    phase_is,
    status,
    transition_time,
    wait_for,
)

EVEN_SUCCEED_ODD_HANG = "leasehold run -- sh -c " + shlex.quote(
    "if [ $((JOB_COMPLETION_INDEX % 2)) -eq 1 ]; then sleep 120; fi; sleep 1; exit 0"
)
"""batch's ``failOddSucceedEven`` pods, made to show the fencing: the odd
indexes stay running (held) instead of failing, so the success policy must
stop them."""


def _assert_success_policy_end(
    api: client.ApiClient, store: LeaseStore, namespace: str, name: str, completed: str
) -> dict[str, Any]:
    """The job ended as batch/v1's: interim then final condition, both ``SuccessPolicy``."""
    st = status(api, namespace, name)
    met, complete = condition(st, "SuccessCriteriaMet"), condition(st, "Complete")
    assert (met["status"], met["reason"]) == ("True", "SuccessPolicy")
    assert (complete["status"], complete["reason"]) == ("True", "SuccessPolicy")
    assert met["message"].startswith("Matched rules at index 0")
    assert transition_time(met) <= transition_time(complete)
    assert met["observedGeneration"] == complete["observedGeneration"] == 1
    assert condition(st, "Failed")["status"] == "False"
    assert "FailureTarget" not in [c["type"] for c in st["conditions"]]
    assert (st["completedIndexes"], st["active"]) == (completed, 0)
    assert st["succeeded"] == len(completed.split(","))
    events(api, namespace, name, until=["SuccessPolicy"])
    return st


def _assert_unfinished_fenced(
    api: client.ApiClient, store: LeaseStore, namespace: str, name: str, indexes: list[int]
) -> None:
    """Each index still running at the decision was stopped: no completion, no pod left."""
    for index in indexes:
        lease = store.get(namespace, index_lease_name(name, index))
        record = lease.record
        assert record.holder_identity is None, index
        assert record.completion is None, index
        assert record.max_fencing_token == record.fencing_token, index  # no claim any more
        holder = f"{name}-{index}-{record.fencing_token}"
        late = store.complete(
            namespace, lease.name, holder, record.fencing_token, Outcome.SUCCEEDED
        )
        assert isinstance(late, Rejected), index
    pods: Any = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{names.LABEL_JOB}={name}"
    )
    running = [
        p.metadata.name
        for p in pods.items
        if p.status.phase not in ("Succeeded", "Failed") and p.metadata.deletion_timestamp is None
    ]
    assert running == []


def test_with_success_policy_succeeded_indexes_rule_succeeds_even_when_some_indexes_remain_pending(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "sp-indexes",
        EVEN_SUCCEED_ODD_HANG,
        lease_seconds=30,
        completions=5,
        parallelism=2,
        completionMode="Indexed",
        backoffLimit=6,
        successPolicy={"rules": [{"succeededIndexes": "0"}]},
    )
    wait_for(
        "SuccessCriteriaMet",
        lambda: condition_true(api_client, namespace, "sp-indexes", "SuccessCriteriaMet"),
        90,
    )
    wait_for("Succeeded", phase_is(api_client, namespace, "sp-indexes", "Succeeded"), 60)
    _assert_success_policy_end(api_client, store, namespace, "sp-indexes", "0")
    _assert_unfinished_fenced(api_client, store, namespace, "sp-indexes", [1])


def test_with_success_policy_succeeded_count_rule_succeeds_even_when_some_indexes_remain_pending(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "sp-count",
        EVEN_SUCCEED_ODD_HANG,
        lease_seconds=30,
        completions=5,
        parallelism=2,
        completionMode="Indexed",
        backoffLimit=100,
        successPolicy={"rules": [{"succeededCount": 1}]},
    )
    wait_for("Succeeded", phase_is(api_client, namespace, "sp-count", "Succeeded"), 90)
    _assert_success_policy_end(api_client, store, namespace, "sp-count", "0")
    _assert_unfinished_fenced(api_client, store, namespace, "sp-count", [1])
    # The indexes never started stay without a lease: nothing to fence there.
    for index in (2, 3, 4):
        with pytest.raises(LeaseNotFoundError):
            store.get(namespace, index_lease_name("sp-count", index))


def test_with_success_policy_succeeds_when_all_indexes_succeeded(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "sp-all",
        "leasehold run -- sh -c 'sleep 1'",
        lease_seconds=30,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
        backoffLimit=6,
        successPolicy={"rules": [{"succeededCount": 2}]},
    )
    wait_for("Succeeded", phase_is(api_client, namespace, "sp-all", "Succeeded"), 90)
    st = _assert_success_policy_end(api_client, store, namespace, "sp-all", "0,1")
    assert st["failed"] == 0


def test_failure_target_comes_before_failed_while_a_stopped_pod_terminates(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """batch/v1's FailureTarget flow: the interim condition at the decision, Failed at the end.

    The pod ignores SIGTERM and has a 4 s grace period, so it is still
    terminating after the cancel stopped its lease: the job shows
    ``FailureTarget`` (reason ``Cancelled``) without ``Failed`` meanwhile.
    """
    template = {
        "spec": {
            "terminationGracePeriodSeconds": 4,
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
    wait_for("Running", phase_is(api_client, namespace, "slow", "Running"), 30)
    local_pod_runner.wait_for_pid(namespace, "slow-1", timeout=30)
    patch_spec(api_client, namespace, "slow", {"cancel": True})

    def interim_only() -> dict[str, Any] | None:
        st = status(api_client, namespace, "slow")
        types = {c["type"]: c for c in st.get("conditions", []) if c["status"] == "True"}
        return st if "FailureTarget" in types and "Failed" not in types else None

    held = wait_for("FailureTarget without Failed", interim_only, 30)
    assert condition(held, "FailureTarget")["reason"] == "Cancelled"
    assert held["phase"] != "Failed"
    assert "completionTime" not in held
    record = store.get(namespace, "slow").record  # fenced at the decision already
    assert (record.holder_identity, record.max_fencing_token) == (None, record.fencing_token)
    assert isinstance(store.complete(namespace, "slow", "slow-1", 1, Outcome.SUCCEEDED), Rejected)

    wait_for("Failed", phase_is(api_client, namespace, "slow", "Failed"), 40)
    st = status(api_client, namespace, "slow")
    target, failed = condition(st, "FailureTarget"), condition(st, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "Cancelled")
    assert transition_time(target) <= transition_time(failed)
    assert st["completionTime"]
    assert "SuccessCriteriaMet" not in [c["type"] for c in st["conditions"]]


def _indexed(**spec: Any) -> dict[str, Any]:
    return {"completions": 4, "completionMode": "Indexed", **spec}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"successPolicy": {"rules": [{"succeededCount": 1}]}, "completions": 4},
            "spec.successPolicy requires spec.completionMode: Indexed",
        ),
        (_indexed(successPolicy={"rules": []}), "spec.successPolicy.rules"),
        (
            _indexed(successPolicy={"rules": [{"succeededCount": 1}] * 21}),
            "spec.successPolicy.rules",
        ),
        (
            _indexed(successPolicy={"rules": [{}]}),
            "needs at least one of succeededCount or succeededIndexes",
        ),
        (
            _indexed(successPolicy={"rules": [{"succeededCount": 5}]}),
            "succeededCount must be less than or equal to spec.completions",
        ),
        (
            _indexed(successPolicy={"rules": [{"succeededCount": -1}]}),
            "spec.successPolicy.rules[0].succeededCount",
        ),
        (
            _indexed(successPolicy={"rules": [{"succeededIndexes": "1-"}]}),
            "spec.successPolicy.rules[0].succeededIndexes",
        ),
    ],
)
def test_success_policy_is_validated_naming_the_field(
    api_client: client.ApiClient, namespace: str, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        create_job(api_client, namespace, "bad", "true", **spec)
    assert refused.value.status == 422
    assert message in str(refused.value.body)


def test_success_policy_is_immutable(api_client: client.ApiClient, namespace: str) -> None:
    create_job(
        api_client,
        namespace,
        "fixed",
        "true",
        **_indexed(successPolicy={"rules": [{"succeededCount": 1}]}),
    )
    with pytest.raises(ApiException) as refused:
        patch_spec(
            api_client, namespace, "fixed", {"successPolicy": {"rules": [{"succeededCount": 2}]}}
        )
    assert refused.value.status == 422
    assert "spec.successPolicy is immutable" in str(refused.value.body)


def test_success_policy_indexes_cel_cannot_read_are_reported_on_the_job(
    operator: OperatorProcess, api_client: client.ApiClient, namespace: str
) -> None:
    """Intervals out of order or past completions pass the schema; the operator reports them."""
    create_job(
        api_client,
        namespace,
        "unordered",
        "true",
        **_indexed(successPolicy={"rules": [{"succeededIndexes": "2,1"}]}),
    )

    def invalid() -> dict[str, Any] | None:
        st = status(api_client, namespace, "unordered")
        ready = [c for c in st.get("conditions", []) if c["type"] == "Ready"]
        return ready[0] if ready and ready[0]["reason"] == "InvalidSpec" else None

    ready = wait_for("Ready=False/InvalidSpec", invalid, 30)
    assert ready["status"] == "False"
    assert "spec.successPolicy.rules[0].succeededIndexes" in ready["message"]
    assert "non-increasing order, previous: 2, current: 1" in ready["message"]
    events(api_client, namespace, "unordered", until=["InvalidSpec"])
    body: Any = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, "unordered"
    )
    assert (body.get("status") or {}).get("phase") is None  # nothing ran
