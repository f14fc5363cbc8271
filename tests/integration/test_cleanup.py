"""Clean-up on a real control plane: ttlSecondsAfterFinished and spec.podRetention.

A finished job is deleted after its TTL while its lease (the name's fencing
domain) stays; fenced-off attempts' pods go, the last one is kept unless
told otherwise.

Each test runs its own ``leasehold operator`` process watching the test's
namespace; pods run as local processes through the pod runner
(docs/lifecycle.md, "Clean-up").
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.lease.store import LeaseStore
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import create_job, events, get_job, phase_is, status, wait_for
from tests.integration.test_attempts import on_token


def _gone(api: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        get_job(api, namespace, name)
    except ApiException as exc:
        return bool(exc.status == 404)
    return False


def _pods(api: client.ApiClient, namespace: str, job: str) -> list[Any]:
    pods: Any = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{names.LABEL_JOB}={job}"
    )
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


def test_ttl_deletes_a_finished_job_and_its_pods_but_keeps_the_fencing_domain(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    store = LeaseStore(api_client)
    create_job(
        api_client,
        namespace,
        "brief",
        "exec leasehold run -- true",
        lease_seconds=30,
        ttlSecondsAfterFinished=6,
    )
    wait_for("Succeeded", phase_is(api_client, namespace, "brief", "Succeeded"), 60)
    finished_at = time.monotonic()
    time.sleep(2.0)  # not early: the job and its pod are kept for the TTL
    assert not _gone(api_client, namespace, "brief")
    assert _pods(api_client, namespace, "brief")
    wait_for("deleted", lambda: _gone(api_client, namespace, "brief"), 30)
    assert time.monotonic() - finished_at >= 4.5  # 1 s timestamp resolution
    wait_for("pods deleted", lambda: not _pods(api_client, namespace, "brief"), 30)
    events(api_client, namespace, "brief", until=["TTLExpired"])
    # The lease outlives the job: a job created again goes on above its token.
    record = store.get(namespace, "brief").record
    assert record.fencing_token == 1 and record.completion is not None
    create_job(api_client, namespace, "brief", "exec leasehold run -- true", lease_seconds=30)
    wait_for("Succeeded again", phase_is(api_client, namespace, "brief", "Succeeded"), 60)
    assert status(api_client, namespace, "brief")["completion"]["fencingToken"] == 2
    time.sleep(1.0)  # no TTL on this incarnation: it stays
    assert not _gone(api_client, namespace, "brief")


def test_ttl_is_validated(api_client: client.ApiClient, namespace: str) -> None:
    with pytest.raises(ApiException) as refused:
        create_job(api_client, namespace, "bad", "true", ttlSecondsAfterFinished=-1)
    assert refused.value.status == 422
    assert "spec.ttlSecondsAfterFinished" in str(refused.value.body)


def _pod_names(api: client.ApiClient, namespace: str, job: str) -> list[str]:
    return sorted(p.metadata.name for p in _pods(api, namespace, job))


FAIL_THEN_SUCCEED = on_token("exec leasehold run -- sh -c 'exit 3'", "exec leasehold run -- true")
NO_DELAY = {"initialDelaySeconds": 0, "factor": 1, "maxDelaySeconds": 0}


@pytest.mark.parametrize(
    ("retention", "kept"),
    [(None, ["keep-2"]), ("All", ["keep-1", "keep-2"]), ("None", [])],
)
def test_pod_retention_keeps_the_pods_it_says(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
    retention: str | None,
    kept: list[str],
) -> None:
    spec: dict[str, Any] = {"backoffLimit": 1, "backoff": NO_DELAY, "lease_seconds": 30}
    if retention is not None:
        spec["podRetention"] = retention
    create_job(api_client, namespace, "keep", FAIL_THEN_SUCCEED, **spec)
    wait_for("Succeeded", phase_is(api_client, namespace, "keep", "Succeeded"), 60)
    history = status(api_client, namespace, "keep")["attemptHistory"]
    assert [(a["fencingToken"], a["reason"]) for a in history] == [(1, "Failed"), (2, "Succeeded")]
    wait_for(f"pods {kept}", lambda: _pod_names(api_client, namespace, "keep") == kept, 30)
    time.sleep(1.0)  # and nothing more goes
    assert _pod_names(api_client, namespace, "keep") == kept


@pytest.mark.parametrize(("retention", "kept"), [(None, ["each-0-1", "each-1-1"]), ("None", [])])
def test_pod_retention_of_an_indexed_job_keeps_the_pods_it_says(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
    retention: str | None,
    kept: list[str],
) -> None:
    spec: dict[str, Any] = {"completions": 2, "completionMode": "Indexed", "lease_seconds": 30}
    if retention is not None:
        spec["podRetention"] = retention
    create_job(api_client, namespace, "each", "exec leasehold run -- true", **spec)
    wait_for("Succeeded", phase_is(api_client, namespace, "each", "Succeeded"), 60)
    wait_for(f"pods {kept}", lambda: _pod_names(api_client, namespace, "each") == kept, 30)
    time.sleep(1.0)  # and nothing more goes
    assert _pod_names(api_client, namespace, "each") == kept
