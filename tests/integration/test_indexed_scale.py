"""An Indexed LeasedJob's reconciles cost what changed, not what the job has.

Issue 29: at 1,000 indexes the operator LISTed every index lease on each
reconcile. It plans on the lease watch's cache instead (its own writes go
into the cache at once, everyone else's through the watch), so an Indexed
job runs from create to ``Succeeded`` without a single LIST of its index
leases. Counted from the operator's own request log (urllib3 logs each
request it sends at DEBUG): the API server's ``apiserver_request_total``
counts every client's LISTs, and on a control plane shared with earlier
tests the namespace controller LISTs JobLeases in every namespace it is
still deleting (a CI run counted 33 while this job ran).
"""

from __future__ import annotations

import re

import pytest
from kubernetes import client

from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import create_job, phase_is, status, wait_for

INDEX_LEASE_LIST = re.compile(r'"GET /apis/leasehold\.dev/[^ "]*/jobleases\?[^ "]*labelSelector=')
"""A request line of a LIST of JobLeases by label: how the actor listed a job's
index leases (the lease watch's own LIST and WATCH carry no selector)."""


@pytest.fixture
def operator_env() -> dict[str, str]:
    """The operator logs every request it sends (urllib3 at DEBUG)."""
    return {"LEASEHOLD_LOG_LEVEL": "DEBUG"}


def test_an_indexed_job_runs_without_listing_its_index_leases(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """Eight indexes, four at a time: dozens of reconciles, no LIST of index leases.

    Before issue 29 each reconcile of the job listed its index leases (16
    LISTs for this job on main at dffaa6b).
    """
    create_job(
        api_client,
        namespace,
        "eight",
        "leasehold run -- sh -c 'sleep 0.5'",
        lease_seconds=30,
        completions=8,
        parallelism=4,
        completionMode="Indexed",
    )
    wait_for("Succeeded", phase_is(api_client, namespace, "eight", "Succeeded"), 120)
    assert status(api_client, namespace, "eight")["completedIndexes"] == "0-7"
    log = operator.logs()
    requests = [line for line in log.splitlines() if '"GET /apis/leasehold.dev/' in line]
    assert requests, "the operator logged no request: the count below would prove nothing"
    lists = [line for line in requests if INDEX_LEASE_LIST.search(line)]
    assert not lists, f"{len(lists)} LISTs of index leases while the job ran: {lists[:3]}"
