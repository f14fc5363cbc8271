"""An Indexed LeasedJob's reconciles cost what changed, not what the job has.

Issue 29: at 1,000 indexes the operator LISTed every index lease on each
reconcile. It plans on the lease watch's cache instead (its own writes go
into the cache at once, everyone else's through the watch), so an Indexed
job runs from create to ``Succeeded`` without a single LIST of JobLeases,
counted by the API server itself (``apiserver_request_total``).
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import create_job, phase_is, status, wait_for


def served(api: client.ApiClient, verb: str, resource: str) -> float:
    """How many ``verb`` requests on ``resource`` the API server has served (all clients)."""
    rest: Any = api.rest_client
    response = rest.request("GET", f"{api.configuration.host}/metrics")
    total = 0.0
    for line in response.read().decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        if f'verb="{verb}"' in labels and f'resource="{resource}"' in labels:
            total += float(value)
    return total


def no_namespace_terminating(api: client.ApiClient, timeout_seconds: float = 60.0) -> None:
    """Wait until no namespace is being deleted, for at most ``timeout_seconds``.

    The namespace controller LISTs every resource of a namespace it deletes,
    JobLeases too: an earlier test's namespace still going would count here.
    One stuck for good (a finalizer no operator removes any more) is not
    waited for longer: the count's tolerance covers its controller's retries.
    """
    core = client.CoreV1Api(api)
    give_up = time.monotonic() + timeout_seconds
    while time.monotonic() < give_up:
        going = [
            ns
            for ns in core.list_namespace().items
            if ns.status and ns.status.phase == "Terminating"
        ]
        if not going:
            return
        time.sleep(1.0)


def test_an_indexed_job_runs_without_listing_its_index_leases(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """Eight indexes, four at a time: dozens of reconciles, no LIST of JobLeases.

    Before issue 29 each reconcile of the job listed its index leases (one
    LIST per reconcile: at least one per index here). The operator's lease
    watch listed once when it started, before the job existed; a re-list
    of the watch (a broken stream) or a LIST by another controller (the
    API server's counter does not say whose) would add one, so two are
    tolerated; an earlier test's namespace deletion is waited out first.
    """
    no_namespace_terminating(api_client)
    before = served(api_client, "LIST", "jobleases")
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
    lists = served(api_client, "LIST", "jobleases") - before
    assert status(api_client, namespace, "eight")["completedIndexes"] == "0-7"
    assert lists <= 2, f"{lists:.0f} LISTs of JobLeases while the job ran"
