"""The pod-facing status and policy of batch/v1 Job, on a real control plane.

``status.ready``, ``status.terminating``, ``spec.podReplacementPolicy`` and
the index failure-count annotations, each named after the batch/v1 behaviour
it mirrors (``test/e2e/apps/job.go`` of kubernetes/kubernetes). Each test runs
its own ``leasehold operator`` process; pods run as local processes through
the pod runner, which sets ``Ready=True`` on a running pod and keeps a deleted
pod terminating until its process exits (SIGKILL after the pod's
``terminationGracePeriodSeconds``).
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from leasehold.lease.store import LeaseStore
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    NO_BACKOFF,
    condition,
    create_job,
    end_reason,
    events,
    patch_spec,
    phase_is,
    renewed,
    status,
    wait_for,
)

GRACE_SECONDS = 8
"""The pods' termination grace period: how long a pod deaf to SIGTERM stays terminating."""


def template(script: str) -> dict[str, Any]:
    """A pod template running ``script`` under ``leasehold run``, with a grace period."""
    command = f"exec leasehold run -- sh -c {shlex.quote(script)}"
    return {
        "spec": {
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "containers": [{"name": "worker", "image": "local", "command": ["sh", "-c", command]}],
        }
    }


def pod(api_client: client.ApiClient, namespace: str, name: str) -> Any | None:
    """The pod, or ``None`` when it does not exist."""
    try:
        return client.CoreV1Api(api_client).read_namespaced_pod(name, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _terminal(found: Any) -> bool:
    """The pod has ended (its phase is ``Succeeded`` or ``Failed``)."""
    return bool(found.status and found.status.phase in ("Succeeded", "Failed"))


@pytest.mark.parametrize("completions", [None, 2], ids=["single", "indexed"])
def test_job_status_ready_counts_the_running_ready_pods(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    completions: int | None,
) -> None:
    """batch/v1 ``status.ready``: active pods with ``Ready=True`` (``countReadyPods``)."""
    go = tmp_path / "go"
    extra: dict[str, Any] = {}
    if completions:
        extra = {"completions": completions, "parallelism": completions}
        extra["completionMode"] = "Indexed"
    create_job(
        api_client,
        namespace,
        "rdy",
        None,
        lease_seconds=10,
        template=template(f"until [ -e {go} ]; do sleep 0.2; done"),
        **extra,
    )
    want = completions or 1
    wait_for(
        f"status.ready={want}",
        lambda: status(api_client, namespace, "rdy").get("ready") == want,
        60,
    )
    assert status(api_client, namespace, "rdy").get("terminating") == 0
    go.touch()
    wait_for("the job done", phase_is(api_client, namespace, "rdy", "Succeeded"), 60)
    wait_for(
        "status.ready=0 once its pods ended",
        lambda: status(api_client, namespace, "rdy").get("ready") == 0,
        30,
    )


def test_job_status_terminating_counts_pods_being_deleted(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """batch/v1 ``status.terminating``: pods with a deletionTimestamp, not yet terminal.

    The worker is paused (SIGSTOP), so its pod stays terminating for its
    grace period after the job is cancelled (its lease is stopped, then its
    pod deleted).
    """
    create_job(
        api_client,
        namespace,
        "trm",
        None,
        lease_seconds=10,
        template=template("sleep 120"),
    )
    wait_for("status.ready=1", lambda: status(api_client, namespace, "trm").get("ready") == 1, 60)
    local_pod_runner.pause(namespace, "trm-1")  # deaf to SIGTERM: killed after its grace period
    patch_spec(api_client, namespace, "trm", {"cancel": True})
    wait_for(
        "status.terminating=1 while the pod is being deleted",
        lambda: status(api_client, namespace, "trm").get("terminating") == 1,
        30,
    )
    # As batch/v1: decided (FailureTarget, the lease already stopped), Failed
    # only once the terminating pod is gone.
    st = status(api_client, namespace, "trm")
    assert condition(st, "FailureTarget")["status"] == "True", st
    assert [c for c in st.get("conditions", []) if c["type"] == "Failed"] == [], st
    assert st["phase"] != "Failed", st
    assert st.get("ready") == 0
    assert pod(api_client, namespace, "trm-1") is not None
    wait_for(
        "status.terminating=0 once the pod is gone",
        lambda: status(api_client, namespace, "trm").get("terminating") == 0,
        GRACE_SECONDS + 30,
    )
    # Terminal first (counted out of terminating), then deleted by the pod runner.
    wait_for("trm-1 gone", lambda: pod(api_client, namespace, "trm-1") is None, 10)
    wait_for("Failed", lambda: status(api_client, namespace, "trm").get("phase") == "Failed", 30)


def test_recreate_pods_only_after_they_have_failed_if_pod_replacement_policy_is_failed(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """Batch e2e: should recreate pods only after they have failed (podReplacementPolicy Failed).

    Attempt 1 stalls (SIGSTOP) and is reclaimed; its pod is deleted and stays
    terminating for its grace period. The next attempt's pod is created only
    once that pod is gone; meanwhile the job says what it waits for.
    """
    create_job(
        api_client,
        namespace,
        "rpl",
        None,
        lease_seconds=5,  # attempt 2 must keep its lease: a 4 s window, not 2 s
        backoff=NO_BACKOFF,
        podReplacementPolicy="Failed",
        template=template('if [ "$LEASEHOLD_FENCING_TOKEN" = 1 ]; then sleep 120; else true; fi'),
    )
    local_pod_runner.wait_for_pid(namespace, "rpl-1", timeout=60)
    wait_for("rpl-1 renewing", lambda: renewed(store, namespace, "rpl"), 30)
    local_pod_runner.pause(namespace, "rpl-1")  # its lease expires; its pod ignores SIGTERM

    def deleting() -> bool:
        found = pod(api_client, namespace, "rpl-1")
        return found is not None and found.metadata.deletion_timestamp is not None

    wait_for("rpl-1 reclaimed and being deleted", deleting, 60)
    overlap, waits = False, []
    while True:
        # The new pod read first, the old one last: an old pod not terminal at the
        # last read was not at the first either. (A terminal one may still be
        # there a moment: the pod runner writes its phase, then deletes it.)
        new = pod(api_client, namespace, "rpl-2")
        old = pod(api_client, namespace, "rpl-1")
        if old is None:
            break
        overlap = overlap or (new is not None and not _terminal(old))
        st = status(api_client, namespace, "rpl")
        waits.append((st.get("terminating"), condition(st, "LeaseHeld").get("reason")))
        time.sleep(0.1)
    assert not overlap, "rpl-2 was created while rpl-1 was terminating"
    assert (1, "WaitingForPodTermination") in waits
    wait_for("the job done", phase_is(api_client, namespace, "rpl", "Succeeded"), 60)
    ended = events(api_client, namespace, "rpl", until=[end_reason(api_client, namespace, "rpl")])
    told = [m for r, m in ended if r == "WaitingForPodTermination"]
    assert len(told) == 1 and "rpl-1" in told[0]
    assert status(api_client, namespace, "rpl")["fencingToken"] == 2


def test_recreate_index_pods_only_after_they_have_failed_if_pod_replacement_policy_is_failed(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """The same for an index of an Indexed job: its next pod waits for its earlier one.

    Index 0's first attempt stalls; index 1 runs to completion meanwhile.
    """
    script = 'if [ "$JOB_COMPLETION_INDEX-$LEASEHOLD_FENCING_TOKEN" = 0-1 ]; then sleep 120; fi'
    create_job(
        api_client,
        namespace,
        "rpx",
        None,
        lease_seconds=5,  # attempt 2 must keep its lease: a 4 s window, not 2 s
        backoff=NO_BACKOFF,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
        podReplacementPolicy="Failed",
        template=template(script),
    )
    local_pod_runner.wait_for_pid(namespace, "rpx-0-1", timeout=60)
    wait_for("rpx-0-1 renewing", lambda: renewed(store, namespace, "rpx.0"), 30)
    local_pod_runner.pause(namespace, "rpx-0-1")

    def deleting() -> bool:
        found = pod(api_client, namespace, "rpx-0-1")
        return found is not None and found.metadata.deletion_timestamp is not None

    wait_for("rpx-0-1 reclaimed and being deleted", deleting, 60)
    overlap, terminating = False, []
    while True:  # the new pod read first, as above
        new = pod(api_client, namespace, "rpx-0-2")
        old = pod(api_client, namespace, "rpx-0-1")
        if old is None:
            break
        overlap = overlap or (new is not None and not _terminal(old))
        terminating.append(status(api_client, namespace, "rpx").get("terminating"))
        time.sleep(0.1)
    assert not overlap, "rpx-0-2 was created while rpx-0-1 was terminating"
    assert 1 in terminating
    wait_for("the job done", phase_is(api_client, namespace, "rpx", "Succeeded"), 60)
    ended = events(api_client, namespace, "rpx", until=[end_reason(api_client, namespace, "rpx")])
    told = [m for r, m in ended if r == "WaitingForPodTermination"]
    assert len(told) == 1 and told[0].startswith("Index 0:") and "rpx-0-1" in told[0]
    assert store.get(namespace, "rpx.0").record.fencing_token == 2


def test_pod_replacement_policy_must_be_failed_when_pod_failure_policy_is_set(
    api_client: client.ApiClient, namespace: str
) -> None:
    """batch/v1 validation: podFailurePolicy requires podReplacementPolicy Failed."""
    rules = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}]}
    with pytest.raises(client.ApiException) as refused:
        create_job(
            api_client,
            namespace,
            "bad",
            "true",
            podFailurePolicy=rules,
            podReplacementPolicy="TerminatingOrFailed",
        )
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert "spec.podReplacementPolicy must be Failed when spec.podFailurePolicy is set" in body
    create_job(
        api_client, namespace, "ok", "true", podFailurePolicy=rules, podReplacementPolicy="Failed"
    )
    create_job(api_client, namespace, "ok-too", "true", podFailurePolicy=rules)


def test_record_the_failure_count_in_the_pod_annotation_when_using_backoff_limit_per_index(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """Batch e2e: should record the failure-count in the Pod annotation (backoffLimitPerIndex).

    Index 0 fails (counted), then exits 3 (ignored by a rule), then succeeds:
    each pod carries the index's failures before it.
    """
    script = 'case "$LEASEHOLD_FENCING_TOKEN" in 1) exit 1;; 2) exit 3;; *) true;; esac'
    listed: Any = client.CoreV1Api(api_client).list_namespaced_pod(namespace)
    since = listed.metadata.resource_version
    create_job(
        api_client,
        namespace,
        "fc",
        None,
        lease_seconds=10,
        completions=1,
        completionMode="Indexed",
        backoffLimitPerIndex=1,
        backoff=NO_BACKOFF,
        podFailurePolicy={
            "rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}]
        },
        template=template(script),
    )
    wait_for("the job done", phase_is(api_client, namespace, "fc", "Succeeded"), 90)
    failures = "batch.kubernetes.io/job-index-failure-count"
    ignored = "batch.kubernetes.io/job-index-ignored-failure-count"
    seen = {}
    for event in watch.Watch().stream(  # every pod as created (earlier ones are deleted)
        client.CoreV1Api(api_client).list_namespaced_pod,
        namespace,
        resource_version=since,
        timeout_seconds=5,
    ):
        meta = event["object"].metadata
        notes = meta.annotations or {}
        seen[meta.name] = (notes.get(failures), notes.get(ignored))
    assert seen == {"fc-0-1": ("0", None), "fc-0-2": ("1", None), "fc-0-3": ("1", "1")}
