"""Indexed LeasedJobs on a real control plane: one JobLease (fencing domain) per index.

Each test runs its own operator; pods run as local processes (the pod runner).
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from kubernetes import client

from leasehold import names
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.store import LeaseStore
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import condition, create_job, events, phase_is, status, wait_for


@pytest.fixture
def store(api_client: client.ApiClient) -> LeaseStore:
    return LeaseStore(api_client)


def indexed_run(script: str) -> str:
    return f"leasehold run -- sh -c {shlex.quote(script)}"


def test_indexed_job_runs_each_index_under_its_own_lease(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "idx",
        indexed_run("echo index $JOB_COMPLETION_INDEX $LEASEHOLD_COMPLETION_INDEX; sleep 0.3"),
        completions=4,
        parallelism=2,
        completionMode="Indexed",
    )
    wait_for("Succeeded", phase_is(api_client, namespace, "idx", "Succeeded"), 90)
    st = status(api_client, namespace, "idx")
    assert st["completedIndexes"] == "0-3"
    assert "failedIndexes" not in st
    assert (st["succeeded"], st["active"], st["completionProgress"]) == (4, 0, "4/4")
    assert condition(st, "Complete")["status"] == "True"
    assert condition(st, "Complete")["observedGeneration"] == 1
    for index in range(4):
        lease = store.get(namespace, index_lease_name("idx", index))
        assert lease.record.job_name == "idx"
        assert lease.record.completion is not None
        assert lease.record.fencing_token == 1  # each index is its own fencing domain
        assert lease.record.job_uid == get_uid(api_client, namespace, "idx")
        assert names.FINALIZER_DOMAIN in lease.body["metadata"]["finalizers"]
        assert not lease.body["metadata"].get("ownerReferences")
        log = local_pod_runner.log(namespace, f"idx-{index}-1")
        assert f"index {index} {index}" in log
    reasons = [r for r, _ in events(api_client, namespace, "idx")]
    assert "Completed" in reasons


def get_uid(api: client.ApiClient, namespace: str, name: str) -> str:
    body: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, name
    )
    return str(body["metadata"]["uid"])
