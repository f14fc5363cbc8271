"""Kueue admits, preempts and resumes LeasedJobs: a REAL Kueue manager (the ``kueue`` fixture).

Each test runs its own ``leasehold operator`` watching the test's namespace,
a ClusterQueue that admits from that namespace only, and pods as local
processes through the pod runner. Kueue v0.17.0 is built from the Go module
proxy and run as a local process (:mod:`kueueproc`); its webhooks are not
registered, so the gate tested here is the operator's own. The rules are
in docs/lifecycle.md, "Queued by Kueue".
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kueueproc.pytest_plugin import Kueue
from leasehold import names
from leasehold.controller.plan import queueing
from leasehold.fencing import MemoryFence, StaleToken
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.protocol import Outcome, Rejection
from leasehold.lease.store import LeaseStore, Rejected
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    condition,
    create_job,
    events,
    get_job,
    patch_spec,
    phase_is,
    status,
    wait_for,
)
from tests.integration.test_attempts import on_token
from tests.integration.test_kubectl_plugin import plugin_json

pytestmark = pytest.mark.cluster

QUEUE = queueing.QUEUE_LABEL
REQUESTS = {"cpu": "100m"}
"""Each job's pod asks this; a ClusterQueue of ``100m`` admits one at a time."""


def _workload(api: client.ApiClient, namespace: str, job: str) -> dict[str, Any] | None:
    uid = get_job(api, namespace, job)["metadata"]["uid"]
    try:
        body: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
            queueing.GROUP, queueing.VERSION, namespace, "workloads",
            queueing.workload_name(job, uid),
        )  # fmt: skip
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return dict(body)


def _wl_condition(api: client.ApiClient, namespace: str, job: str, type_: str) -> dict[str, Any]:
    wl = _workload(api, namespace, job) or {}
    found = [c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == type_]
    return found[0] if found else {}


def _pods(api: client.ApiClient, namespace: str, job: str) -> list[Any]:
    return list(
        client.CoreV1Api(api)
        .list_namespaced_pod(namespace, label_selector=f"{names.LABEL_JOB}={job}")
        .items
    )


def _finished(
    api: client.ApiClient, namespace: str, job: str
) -> Callable[[], dict[str, Any] | None]:
    """A check for :func:`wait_for`: the job's Workload ``Finished`` condition, once it has one."""
    return lambda: _wl_condition(api, namespace, job, "Finished") or None


def _set_quota(kueue: Kueue, cluster_queue: str, cpu: str) -> None:
    path = "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota"
    patch = [{"op": "replace", "path": path, "value": cpu}]
    kueue.kubectl(
        "patch", "clusterqueues.kueue.x-k8s.io", cluster_queue, "--type=json",
        "-p", json.dumps(patch),
    )  # fmt: skip


def test_a_queued_job_does_not_start_until_its_workload_is_admitted(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    queue = kueue.queue(namespace, {"cpu": "0"})  # nothing fits yet
    labels = {QUEUE: queue.local_queue}
    create_job(
        api_client, namespace, "queued", "exec leasehold run -- true",
        lease_seconds=10, labels=labels, requests=REQUESTS,
    )  # fmt: skip
    wait_for("Suspended", phase_is(api_client, namespace, "queued", "Suspended"), 30)
    suspended = condition(status(api_client, namespace, "queued"), "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("True", "WaitingForAdmission")
    assert f"LocalQueue {queue.local_queue}" in suspended["message"]
    record = store.get(namespace, "queued").record
    assert (record.suspended, record.fencing_token) == (True, 0)  # the store's gate too
    refused = store.claim(namespace, "queued", "intruder")
    assert isinstance(refused, Rejected) and refused.rejection is Rejection.SUSPENDED
    wl = wait_for("its Workload", lambda: _workload(api_client, namespace, "queued"))
    owner = wl["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("LeasedJob", "queued", True)
    assert wl["spec"]["queueName"] == queue.local_queue
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 1)]
    wait_for(
        "Kueue to find no quota",
        lambda: (
            _wl_condition(api_client, namespace, "queued", "QuotaReserved").get("reason")
            == "Pending"
        ),
    )
    time.sleep(1.0)  # the operator has had its chance to (wrongly) start a pod
    assert _pods(api_client, namespace, "queued") == []

    _set_quota(kueue, queue.cluster_queue, "100m")
    wait_for("Succeeded", phase_is(api_client, namespace, "queued", "Succeeded"), 60)
    st = status(api_client, namespace, "queued")
    assert st["completion"]["fencingToken"] == 1
    admitted = condition(st, "Suspended")
    assert (admitted["status"], admitted["reason"]) == ("False", "Admitted")
    assert "Admitted" in [r for r, _ in events(api_client, namespace, "queued")]
    finished = wait_for(
        "the Workload Finished",
        _finished(api_client, namespace, "queued"),
    )
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")


def test_quota_for_one_job_the_second_waits_until_the_first_finishes(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
    tmp_path: Path,
) -> None:
    queue = kueue.queue(namespace, {"cpu": "100m"})
    labels = {QUEUE: queue.local_queue}
    done = tmp_path / "first-may-end"
    hold = f"exec leasehold run -- sh -c 'until [ -e {done} ]; do sleep 0.2; done'"
    create_job(
        api_client, namespace, "first", hold, lease_seconds=10, labels=labels, requests=REQUESTS
    )
    wait_for("first Running", phase_is(api_client, namespace, "first", "Running"), 30)
    create_job(
        api_client, namespace, "second", "exec leasehold run -- true",
        lease_seconds=10, labels=labels, requests=REQUESTS,
    )  # fmt: skip
    wait_for("second Suspended", phase_is(api_client, namespace, "second", "Suspended"), 30)
    wait_for(
        "the LocalQueue counting 1 pending, 1 admitted",
        lambda: (
            lambda s: (s.get("pendingWorkloads"), s.get("admittedWorkloads")) == (1, 1)
        )(kueue.kubectl.json("get", "localqueues.kueue.x-k8s.io", queue.local_queue,
                             "-n", namespace).get("status", {})),
    )  # fmt: skip
    time.sleep(1.0)
    assert _pods(api_client, namespace, "second") == []  # no pod ...
    assert store.get(namespace, "second").record.fencing_token == 0  # ... and no claim
    assert condition(status(api_client, namespace, "second"), "Suspended")["reason"] == (
        "WaitingForAdmission"
    )

    done.touch()
    wait_for("first Succeeded", phase_is(api_client, namespace, "first", "Succeeded"), 30)
    wait_for("second Succeeded", phase_is(api_client, namespace, "second", "Succeeded"), 60)
    assert status(api_client, namespace, "second")["completion"]["fencingToken"] == 1
    for job in ("first", "second"):
        finished = wait_for(f"{job}'s Workload Finished", _finished(api_client, namespace, job))
        assert finished["reason"] == "Succeeded"


def test_preemption_by_a_higher_priority_job_is_a_fenced_suspend_then_a_resume(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    kueue.priority_class("leasehold-low", 10)
    kueue.priority_class("leasehold-high", 1000)
    queue = kueue.queue(namespace, {"cpu": "100m"})
    low = {QUEUE: queue.local_queue, queueing.PRIORITY_LABEL: "leasehold-low"}
    high = {QUEUE: queue.local_queue, queueing.PRIORITY_LABEL: "leasehold-high"}
    command = on_token("exec leasehold run -- sleep 120", "exec leasehold run -- true")
    create_job(
        api_client, namespace, "low", command, lease_seconds=5, max_attempts=1,
        labels=low, requests=REQUESTS,
    )  # fmt: skip
    wait_for("low Running", phase_is(api_client, namespace, "low", "Running"), 30)
    local_pod_runner.wait_for_pid(namespace, "low-1", timeout=30)
    assert (_workload(api_client, namespace, "low") or {})["spec"]["priority"] == 10
    fence = MemoryFence()
    fence.admit("result", 1)  # the low job's attempt 1 writes to a fenced target

    create_job(
        api_client, namespace, "high", "exec leasehold run -- true",
        lease_seconds=5, labels=high, requests=REQUESTS,
    )  # fmt: skip
    wait_for("low's lease suspended", lambda: store.get(namespace, "low").record.suspended, 30)
    record = store.get(namespace, "low").record
    assert (record.holder_identity, record.fencing_token) == (None, 1)
    late = store.complete(namespace, "low", "low-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected) and late.rejection is Rejection.NOT_HOLDER
    preempted = wait_for(
        "low told preempted",
        lambda: (lambda c: c if c.get("reason") == "Preempted" else None)(
            condition(status(api_client, namespace, "low"), "Suspended")
        ),
    )
    assert preempted["status"] == "True" and "preempted by Kueue" in preempted["message"]
    assert "Preempted" in [r for r, _ in events(api_client, namespace, "low")]
    wait_for("high Succeeded", phase_is(api_client, namespace, "high", "Succeeded"), 60)

    wait_for("low Succeeded", phase_is(api_client, namespace, "low", "Succeeded"), 90)
    st = status(api_client, namespace, "low")
    assert st["completion"]["fencingToken"] == 2
    assert [(a["fencingToken"], a["reason"]) for a in st["attemptHistory"]] == [
        (1, "Suspended"),
        (2, "Succeeded"),
    ]
    fence.admit("result", 2)  # the resumed attempt's write ...
    with pytest.raises(StaleToken):
        fence.admit("result", 1)  # ... and the preempted worker's late one is refused
    requeued = _wl_condition(api_client, namespace, "low", "Requeued")
    assert (requeued.get("status"), requeued.get("reason")) == ("True", "Preempted")
    finished = wait_for(
        "low's Workload Finished",
        _finished(api_client, namespace, "low"),
    )
    assert finished["reason"] == "Succeeded"


def test_a_failed_queued_job_finishes_its_workload_as_failed(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    queue = kueue.queue(namespace, {"cpu": "100m"})
    create_job(
        api_client, namespace, "fails", "exec leasehold run -- false", lease_seconds=10,
        max_attempts=1, labels={QUEUE: queue.local_queue}, requests=REQUESTS,
    )  # fmt: skip
    wait_for("Failed", phase_is(api_client, namespace, "fails", "Failed"), 60)
    finished = wait_for(
        "the Workload Finished",
        _finished(api_client, namespace, "fails"),
    )
    assert (finished["status"], finished["reason"]) == ("True", "Failed")


def test_an_unlabelled_job_makes_no_workload(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    create_job(api_client, namespace, "plain", "exec leasehold run -- true", lease_seconds=10)
    wait_for("Succeeded", phase_is(api_client, namespace, "plain", "Succeeded"), 30)
    listed: Any = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        queueing.GROUP, queueing.VERSION, namespace, "workloads"
    )
    assert listed["items"] == []
    assert "Suspended" not in [c["type"] for c in status(api_client, namespace, "plain")
                               .get("conditions", [])]  # fmt: skip


def test_an_indexed_job_is_admitted_with_its_parallelism_and_its_flavors_node_labels(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    # A flavor whose node labels the pod runner's node has: its pods still schedule.
    flavor = namespace[:50].rstrip("-") + "-runner"
    toleration = {"key": "leasehold.dev/queued", "operator": "Exists", "effect": "NoSchedule"}
    objects = [
        {"apiVersion": queueing.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor},
         "spec": {"nodeLabels": {"leasehold.dev/podrunner": "true"}, "tolerations": [toleration]}},
        {"apiVersion": queueing.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": flavor},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                  "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                      {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "200m"}]}]}]}},
        {"apiVersion": queueing.API_VERSION, "kind": "LocalQueue",
         "metadata": {"name": "runner", "namespace": namespace},
         "spec": {"clusterQueue": flavor}},
    ]  # fmt: skip
    for obj in objects:
        kueue.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))
    create_job(
        api_client, namespace, "indexed", "exec leasehold run -- true", lease_seconds=10,
        labels={QUEUE: "runner"}, requests=REQUESTS,
        completionMode="Indexed", completions=3, parallelism=2,
    )  # fmt: skip
    wl = wait_for("its Workload", lambda: _workload(api_client, namespace, "indexed"))
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 2)]
    pods = wait_for("its pods", lambda: _pods(api_client, namespace, "indexed"), 30)
    assert pods[0].spec.node_selector == {"leasehold.dev/podrunner": "true"}
    assert [t.key for t in pods[0].spec.tolerations or []].count("leasehold.dev/queued") == 1
    wait_for("Succeeded", phase_is(api_client, namespace, "indexed", "Succeeded"), 60)
    admission = (_workload(api_client, namespace, "indexed") or {}).get("status", {})
    finished = [c for c in admission.get("conditions", []) if c["type"] == "Finished"]
    assert finished and finished[0]["reason"] == "Succeeded"
    template = get_job(api_client, namespace, "indexed")["spec"]["template"]["spec"]
    assert "nodeSelector" not in template  # the job stays as the user wrote it


def test_kubectl_leasehold_status_shows_where_a_queued_job_stands(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
) -> None:
    queue = kueue.queue(namespace, {"cpu": "0"})
    create_job(
        api_client, namespace, "shown", "exec leasehold run -- true",
        lease_seconds=10, labels={QUEUE: queue.local_queue}, requests=REQUESTS,
    )  # fmt: skip
    wait_for("Suspended", phase_is(api_client, namespace, "shown", "Suspended"), 30)
    wait_for("its Workload", lambda: _workload(api_client, namespace, "shown"))
    [row] = plugin_json(kubeconfig, namespace, "status", "shown")
    assert (row["QUEUE"], row["SUSPENDED"]) == (f"{queue.local_queue} (pending)", True)
    assert row["REASON"] == "WaitingForAdmission"

    _set_quota(kueue, queue.cluster_queue, "100m")
    wait_for("Succeeded", phase_is(api_client, namespace, "shown", "Succeeded"), 60)
    wait_for("the Workload Finished", _finished(api_client, namespace, "shown"))
    [row] = plugin_json(kubeconfig, namespace, "status", "shown")
    assert (row["QUEUE"], row["SUSPENDED"]) == (f"{queue.local_queue} (finished: Succeeded)", False)


def test_preempting_an_indexed_job_suspends_every_index_fenced_and_resumes_each_above(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    kueue.priority_class("leasehold-low", 10)
    kueue.priority_class("leasehold-high", 1000)
    queue = kueue.queue(namespace, {"cpu": "200m"})  # room for the Indexed job's 2 pods
    low = {QUEUE: queue.local_queue, queueing.PRIORITY_LABEL: "leasehold-low"}
    high = {QUEUE: queue.local_queue, queueing.PRIORITY_LABEL: "leasehold-high"}
    create_job(
        api_client, namespace, "shards", FIRST_TOKEN_HANGS, lease_seconds=5, max_attempts=1,
        labels=low, requests=REQUESTS, completionMode="Indexed", completions=2, parallelism=2,
    )  # fmt: skip
    for index in (0, 1):
        local_pod_runner.wait_for_pid(namespace, f"shards-{index}-1", timeout=60)
    create_job(
        api_client, namespace, "urgent", "exec leasehold run -- true",
        lease_seconds=5, labels=high, requests={"cpu": "200m"},
    )  # fmt: skip
    for index in (0, 1):
        lease = index_lease_name("shards", index)
        wait_for(f"{lease} suspended", functools.partial(_suspended, store, namespace, lease), 30)
        record = store.get(namespace, lease).record
        assert (record.holder_identity, record.fencing_token) == (None, 1)
        late = store.complete(namespace, lease, f"shards-{index}-1", 1, Outcome.SUCCEEDED)
        assert isinstance(late, Rejected) and late.rejection is Rejection.NOT_HOLDER
    # Told once, in the reconcile's Events after its suspend writes (the condition may
    # already say Admitted again by the time it is read: the preemptor is quick).
    wait_for(
        "a Preempted Event",
        lambda: "Preempted" in [r for r, _ in events(api_client, namespace, "shards")],
    )
    wait_for("urgent Succeeded", phase_is(api_client, namespace, "urgent", "Succeeded"), 60)
    wait_for("shards Succeeded", phase_is(api_client, namespace, "shards", "Succeeded"), 90)
    tokens = {i: store.get(namespace, index_lease_name("shards", i)).record.fencing_token
              for i in (0, 1)}  # fmt: skip
    assert tokens == {0: 2, 1: 2}  # each index resumed above its preempted token
    assert _finished(api_client, namespace, "shards")() is not None


FIRST_TOKEN_HANGS = (
    "exec leasehold run -- sh -c '[ \"$LEASEHOLD_FENCING_TOKEN\" = 1 ] && sleep 120; exit 0'"
)
"""A worker that hangs under token 1 and succeeds under any later token."""


def _suspended(store: LeaseStore, namespace: str, lease: str) -> bool:
    return store.get(namespace, lease).record.suspended


def test_a_job_moved_to_another_queue(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """A pending job relabelled to another LocalQueue: its Workload follows (as jobframework's)."""
    full = kueue.queue(namespace, {"cpu": "0"}, name="full")
    free = kueue.queue(namespace, {"cpu": "100m"}, name="free")
    create_job(
        api_client, namespace, "moved", "exec leasehold run -- true",
        lease_seconds=10, labels={QUEUE: full.local_queue}, requests=REQUESTS,
    )  # fmt: skip
    # Two ClusterQueues: kueueproc cuts their names at 63 characters (hence a short test name).
    assert full.cluster_queue != free.cluster_queue
    wait_for("Suspended", phase_is(api_client, namespace, "moved", "Suspended"), 30)
    wait_for(
        "Kueue to find no quota in the full queue",
        lambda: (
            _wl_condition(api_client, namespace, "moved", "QuotaReserved").get("reason")
            == "Pending"
        ),
    )
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, "moved",
        {"metadata": {"labels": {QUEUE: free.local_queue}}},
    )  # fmt: skip
    wait_for("Succeeded", phase_is(api_client, namespace, "moved", "Succeeded"), 60)
    wl = _workload(api_client, namespace, "moved") or {}
    assert wl["spec"]["queueName"] == free.local_queue
    assert wl["status"]["admission"]["clusterQueue"] == free.cluster_queue


def test_an_admitted_indexed_job_scaled_gets_a_new_workload_its_attempts_fenced_meanwhile(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    queue = kueue.queue(namespace, {"cpu": "200m"})
    create_job(
        api_client, namespace, "elastic", FIRST_TOKEN_HANGS, lease_seconds=5, max_attempts=1,
        labels={QUEUE: queue.local_queue}, requests=REQUESTS,
        completionMode="Indexed", completions=2, parallelism=2,
    )  # fmt: skip
    local_pod_runner.wait_for_pid(namespace, "elastic-0-1", timeout=60)
    first = (_workload(api_client, namespace, "elastic") or {})["metadata"]["uid"]
    patch_spec(api_client, namespace, "elastic", {"completions": 1, "parallelism": 1})
    lease = index_lease_name("elastic", 0)
    wait_for(f"{lease} suspended", functools.partial(_suspended, store, namespace, lease), 30)
    late = store.complete(namespace, lease, "elastic-0-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected) and late.rejection is Rejection.NOT_HOLDER
    assert "WorkloadReplaced" in [r for r, _ in events(api_client, namespace, "elastic")]
    wait_for("Succeeded", phase_is(api_client, namespace, "elastic", "Succeeded"), 90)
    wl = _workload(api_client, namespace, "elastic") or {}
    assert wl["metadata"]["uid"] != first
    assert [p["count"] for p in wl["spec"]["podSets"]] == [1]
    assert store.get(namespace, lease).record.fencing_token == 2  # resumed above its token
