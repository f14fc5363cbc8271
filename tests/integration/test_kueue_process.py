"""A real Kueue (the ``kueue`` fixture) admits Workloads against a quota on the local control plane.

This proves the test infrastructure the operator's Kueue integration stands
on: Kueue's manager, built from the Go module proxy, runs as a local process
against the local kube-apiserver and does its own job there: quota
reservation, admission, pending beyond the quota, release of the quota when
a Workload finishes. The Workloads here have no owner: no operator runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kueueproc import API_VERSION
from kueueproc.pytest_plugin import Kueue
from localcluster.kubectl import Kubectl
from tests.integration.jobs import wait_for

pytestmark = pytest.mark.cluster


def _workload(namespace: str, name: str, queue: str, cpu: str) -> dict[str, Any]:
    """A Workload as an external framework's controller makes it: complete, no webhook defaults."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "leasehold:0.1.0",
                                    "resources": {"requests": {"cpu": cpu}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def _conditions(kubectl: Kubectl, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    wl = kubectl.json("get", "workloads.kueue.x-k8s.io", name, "-n", namespace)
    return {c["type"]: c for c in wl.get("status", {}).get("conditions", [])}


def _admitted(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    conds = _conditions(kubectl, namespace, name)
    quota, admitted = conds.get("QuotaReserved", {}), conds.get("Admitted", {})
    if quota.get("status") == "True" and admitted.get("status") == "True":
        return conds
    return None


def _local_queue_counts(kubectl: Kubectl, namespace: str, name: str) -> tuple[int, int]:
    status = kubectl.json("get", "localqueues.kueue.x-k8s.io", name, "-n", namespace).get(
        "status", {}
    )
    return status.get("pendingWorkloads", 0), status.get("admittedWorkloads", 0)


def test_kueue_admits_a_workload_within_quota_and_holds_the_next_pending(
    kueue: Kueue, kubectl: Kubectl, namespace: str
) -> None:
    """Quota for one: the first is admitted, the second pends until the first finishes."""
    queue = kueue.queue(namespace, {"cpu": "1"})
    first = _workload(namespace, "first", queue.local_queue, "1")
    kubectl("create", "-f", "-", input=json.dumps(first))
    conds = wait_for("the first Workload admitted", lambda: _admitted(kubectl, namespace, "first"))
    assert conds["QuotaReserved"]["reason"] == "QuotaReserved"
    wl = kubectl.json("get", "workloads.kueue.x-k8s.io", "first", "-n", namespace)
    assignment = wl["status"]["admission"]
    assert assignment["clusterQueue"] == queue.cluster_queue
    assert assignment["podSetAssignments"][0]["flavors"] == {"cpu": queue.flavor}

    second = _workload(namespace, "second", queue.local_queue, "1")
    kubectl("create", "-f", "-", input=json.dumps(second))
    pending = wait_for(
        "the second Workload seen pending (QuotaReserved False)",
        lambda: _conditions(kubectl, namespace, "second").get("QuotaReserved"),
    )
    assert pending["status"] == "False", pending
    assert pending["reason"] == "Pending", pending
    assert "insufficient" in pending["message"].lower(), pending
    assert wait_for(
        "the LocalQueue counting 1 pending, 1 admitted",
        lambda: _local_queue_counts(kubectl, namespace, queue.local_queue) == (1, 1),
    )
    assert "Admitted" not in _conditions(kubectl, namespace, "second") or (
        _conditions(kubectl, namespace, "second")["Admitted"]["status"] == "False"
    )

    # The first finishes (what an external framework's controller writes): its quota is released.
    finished = {
        "type": "Finished",
        "status": "True",
        "reason": "Succeeded",
        "message": "done",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    patch = [{"op": "add", "path": "/status/conditions/-", "value": finished}]
    kubectl(
        "patch", "workloads.kueue.x-k8s.io", "first", "-n", namespace,
        "--subresource=status", "--type=json", "-p", json.dumps(patch),
    )  # fmt: skip
    wait_for(
        "the second Workload admitted once the first finished",
        lambda: _admitted(kubectl, namespace, "second"),
        timeout=60,
    )
