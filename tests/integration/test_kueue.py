"""Kueue admits, preempts and resumes LeasedJobs: a REAL Kueue manager (the ``kueue`` fixture).

Each test runs its own ``leasehold operator`` watching the test's namespace,
a ClusterQueue that admits from that namespace only, and pods as local
processes through the pod runner. Kueue v0.17.0 is built from the Go module
proxy and run as a local process (:mod:`kueueproc`); its webhooks are not
registered, so the gate tested here is the operator's own. The rules are
in docs/lifecycle.md, "Queued by Kueue".

Leases are 10-15 s: these tests are about the queue's fencing, not expiry,
and many allow one attempt (a preemption must not use one). A CI run has
seen the API server leave a worker's renewals unanswered for over 4 s on a
loaded machine, which a 5 s lease (a 4 s window) does not survive.
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
    events(api_client, namespace, "queued", until=["Admitted"])
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
        api_client, namespace, "low", command, lease_seconds=15, max_attempts=1,
        labels=low, requests=REQUESTS,
    )  # fmt: skip
    wait_for("low Running", phase_is(api_client, namespace, "low", "Running"), 30)
    local_pod_runner.wait_for_pid(namespace, "low-1", timeout=30)
    assert (_workload(api_client, namespace, "low") or {})["spec"]["priority"] == 10

    create_job(
        api_client, namespace, "high", "exec leasehold run -- true",
        lease_seconds=15, labels=high, requests=REQUESTS,
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
    events(api_client, namespace, "low", until=["Preempted"])
    wait_for("high Succeeded", phase_is(api_client, namespace, "high", "Succeeded"), 60)

    wait_for("low Succeeded", phase_is(api_client, namespace, "low", "Succeeded"), 90)
    st = status(api_client, namespace, "low")
    assert st["completion"]["fencingToken"] == 2
    assert [(a["fencingToken"], a["reason"]) for a in st["attemptHistory"]] == [
        (1, "Suspended"),
        (2, "Succeeded"),
    ]
    # The preempted worker's late write to a fenced target (the ValidatingAdmissionPolicy,
    # written by the operator-run worker) is refused on kind: tests/kind/test_kueue.py.
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


def _runner_flavor_queue(kueue: Kueue, namespace: str, cpu: str = "200m") -> str:
    """LocalQueue ``runner``: a flavor whose node labels the pod runner's node has.

    Returns:
        The ClusterQueue's name (``cpu`` of quota).
    """
    flavor = namespace[:50].rstrip("-") + "-runner"
    toleration = {"key": "leasehold.dev/queued", "operator": "Exists", "effect": "NoSchedule"}
    objects = [
        {"apiVersion": queueing.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor},
         "spec": {"nodeLabels": {"leasehold.dev/podrunner": "true"}, "tolerations": [toleration]}},
        {"apiVersion": queueing.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": flavor},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                  "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                      {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]}},
        {"apiVersion": queueing.API_VERSION, "kind": "LocalQueue",
         "metadata": {"name": "runner", "namespace": namespace},
         "spec": {"clusterQueue": flavor}},
    ]  # fmt: skip
    for obj in objects:
        kueue.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))
    return flavor


def test_an_indexed_job_is_admitted_with_its_parallelism_and_its_flavors_node_labels(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    _runner_flavor_queue(kueue, namespace)
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
    # The Workload is finished by the reconcile after the job's terminal status.
    finished = wait_for("the Workload Finished", _finished(api_client, namespace, "indexed"))
    assert finished["reason"] == "Succeeded", finished
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
        api_client, namespace, "shards", FIRST_TOKEN_HANGS, lease_seconds=15, max_attempts=1,
        labels=low, requests=REQUESTS, completionMode="Indexed", completions=2, parallelism=2,
    )  # fmt: skip
    for index in (0, 1):
        local_pod_runner.wait_for_pid(namespace, f"shards-{index}-1", timeout=60)
    create_job(
        api_client, namespace, "urgent", "exec leasehold run -- true",
        lease_seconds=15, labels=high, requests={"cpu": "200m"},
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
    events(api_client, namespace, "shards", until=["Preempted"])
    wait_for("urgent Succeeded", phase_is(api_client, namespace, "urgent", "Succeeded"), 60)
    wait_for("shards Succeeded", phase_is(api_client, namespace, "shards", "Succeeded"), 90)
    tokens = {i: store.get(namespace, index_lease_name("shards", i)).record.fencing_token
              for i in (0, 1)}  # fmt: skip
    assert tokens == {0: 2, 1: 2}  # each index resumed above its preempted token
    # Marked after the job's status write (retried after a conflict with Kueue).
    wait_for("shards' Workload Finished", _finished(api_client, namespace, "shards"))


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
        api_client, namespace, "elastic", LINGERS_UNDER_TOKEN_1,
        lease_seconds=15, max_attempts=1, labels={QUEUE: queue.local_queue}, requests=REQUESTS,
        pod_spec=GRACE, completionMode="Indexed", completions=2, parallelism=2,
    )  # fmt: skip
    local_pod_runner.wait_for_pid(namespace, "elastic-0-1", timeout=60)
    first = (_workload(api_client, namespace, "elastic") or {})["metadata"]["uid"]
    patch_spec(api_client, namespace, "elastic", {"completions": 1, "parallelism": 1})
    lease = index_lease_name("elastic", 0)
    wait_for(f"{lease} suspended", functools.partial(_suspended, store, namespace, lease), 30)
    late = store.complete(namespace, lease, "elastic-0-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected) and late.rejection is Rejection.NOT_HOLDER
    # jobframework's order: the attempts stop first (fenced), the Workload goes after.
    started = time.monotonic()
    while (_workload(api_client, namespace, "elastic") or {}).get("metadata", {}).get(
        "uid"
    ) == first:
        assert time.monotonic() - started < 60, "the old Workload was never deleted"
        time.sleep(0.1)
    lingering = [
        p.metadata.name
        for p in _alive(api_client, namespace, "elastic")
        if (p.metadata.labels or {}).get(names.LABEL_TOKEN) == "1"
    ]
    assert lingering == [], "the Workload was deleted while token-1 pods still ran"
    events(api_client, namespace, "elastic", until=["WorkloadReplaced"])
    wait_for("Succeeded", phase_is(api_client, namespace, "elastic", "Succeeded"), 90)
    wl = _workload(api_client, namespace, "elastic") or {}
    assert wl["metadata"]["uid"] != first
    assert [p["count"] for p in wl["spec"]["podSets"]] == [1]
    assert store.get(namespace, lease).record.fencing_token == 2  # resumed above its token


LINGERS = "trap '' TERM; leasehold run -- sleep 120; sleep 60"
"""A worker whose pod ignores SIGTERM: deleted, it lives out its grace period."""
LINGERS_UNDER_TOKEN_1 = "exec " + on_token(LINGERS, "exec leasehold run -- true")
"""Lingers (ignoring SIGTERM) under token 1; succeeds under any later token."""
GRACE = {"terminationGracePeriodSeconds": 20}
"""The pod runner honours a pod's grace period (SIGKILL after it; capped at 30 s)."""


def _suspended_because(
    api: client.ApiClient, namespace: str, job: str, reason: str
) -> dict[str, Any] | None:
    """The job's ``Suspended`` condition once its reason is ``reason``."""
    found = [c for c in status(api, namespace, job).get("conditions") or []
             if c["type"] == "Suspended" and c.get("reason") == reason]  # fmt: skip
    return found[0] if found else None


def _alive(api: client.ApiClient, namespace: str, job: str) -> list[Any]:
    """The job's pods that are not terminal (one being deleted included)."""
    return [p for p in _pods(api, namespace, job) if p.status.phase not in ("Succeeded", "Failed")]


@pytest.mark.parametrize(
    ("indexed", "restart"),
    [(False, False), (True, False), (False, True)],
    ids=["single", "indexed", "operator-restarted-during-eviction"],
)
def test_preemption_keeps_the_quota_reserved_until_the_preempted_pods_are_gone(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
    indexed: bool,
    restart: bool,
) -> None:
    """As batch/v1 Job under Kueue: the quota comes back once the job has no active pod.

    ``restart``: the operator crashes and starts again while the preempted pod
    lives out its grace period (its caches know nothing of that pod then).
    """
    kueue.priority_class("leasehold-low", 10)
    kueue.priority_class("leasehold-high", 1000)
    queue = kueue.queue(namespace, {"cpu": "200m" if indexed else "100m"})
    low = {QUEUE: queue.local_queue, queueing.PRIORITY_LABEL: "leasehold-low"}
    high = {QUEUE: queue.local_queue, queueing.PRIORITY_LABEL: "leasehold-high"}
    shape: dict[str, Any] = (
        {"completionMode": "Indexed", "completions": 2, "parallelism": 2} if indexed else {}
    )
    create_job(
        api_client, namespace, "low", LINGERS_UNDER_TOKEN_1, lease_seconds=15, max_attempts=1,
        labels=low, requests=REQUESTS, pod_spec=GRACE, **shape,
    )  # fmt: skip
    for pod in ("low-0-1", "low-1-1") if indexed else ("low-1",):
        local_pod_runner.wait_for_pid(namespace, pod, timeout=30)
    create_job(
        api_client, namespace, "high", "exec leasehold run -- true",
        lease_seconds=15, labels=high, requests={"cpu": "200m"} if indexed else REQUESTS,
    )  # fmt: skip
    wait_for(
        "low's pods being deleted",
        lambda: any(p.metadata.deletion_timestamp for p in _alive(api_client, namespace, "low")),
        30,
    )
    started = time.monotonic()
    if restart:
        operator.kill()
        operator.start()
    while True:
        # Read the quota and the preemptor's pods first, low's pods last: a pod
        # of low alive at the last read was alive at the first two, so they must
        # show its quota held and no pod of high. (Read the other way round, low's
        # pod may end, its quota go back and high's pod start between the reads.)
        reserved = _wl_condition(api_client, namespace, "low", "QuotaReserved")
        high_pods = _pods(api_client, namespace, "high")
        if not _alive(api_client, namespace, "low"):
            break
        assert reserved.get("status") == "True", (time.monotonic() - started, reserved)
        assert high_pods == []  # no room for the preemptor yet
        time.sleep(0.2)
    assert time.monotonic() - started > 5  # the grace period was lived out
    wait_for("high Succeeded", phase_is(api_client, namespace, "high", "Succeeded"), 60)
    wait_for("low Succeeded", phase_is(api_client, namespace, "low", "Succeeded"), 90)


def _unlabel(api: client.ApiClient, namespace: str, job: str) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, job,
        {"metadata": {"labels": {QUEUE: None}}},
    )  # fmt: skip


def _local_queue_counts(kueue: Kueue, namespace: str, local_queue: str) -> tuple[Any, Any]:
    st = kueue.kubectl.json("get", "localqueues.kueue.x-k8s.io", local_queue, "-n", namespace).get(
        "status", {}
    )
    return st.get("pendingWorkloads"), st.get("admittedWorkloads")


def test_removing_the_queue_label_of_a_pending_job_retires_its_workload_then_it_runs(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """As a queue change under jobframework: the Workload goes before the job runs unqueued."""
    queue = kueue.queue(namespace, {"cpu": "0"})
    create_job(
        api_client, namespace, "unqueued", "exec leasehold run -- true",
        lease_seconds=10, labels={QUEUE: queue.local_queue}, requests=REQUESTS,
    )  # fmt: skip
    wait_for("its Workload", lambda: _workload(api_client, namespace, "unqueued"))
    wait_for("Suspended", phase_is(api_client, namespace, "unqueued", "Suspended"), 30)
    _unlabel(api_client, namespace, "unqueued")
    wait_for("Succeeded", phase_is(api_client, namespace, "unqueued", "Succeeded"), 60)
    assert _workload(api_client, namespace, "unqueued") is None
    assert "workload" not in status(api_client, namespace, "unqueued")
    events(api_client, namespace, "unqueued", until=["QueueLabelRemoved"])
    wait_for(
        "the LocalQueue counting nothing",
        lambda: _local_queue_counts(kueue, namespace, queue.local_queue) in ((0, 0), (None, None)),
    )


def test_removing_the_queue_label_of_an_evicted_job_gives_its_quota_back_then_it_runs(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """Evicted (deactivated), unlabelled with quota reserved: runs unqueued once its pod ended."""
    queue = kueue.queue(namespace, {"cpu": "100m"})
    create_job(
        api_client, namespace, "evicted", LINGERS_UNDER_TOKEN_1,
        lease_seconds=15, max_attempts=1, labels={QUEUE: queue.local_queue}, requests=REQUESTS,
        pod_spec=GRACE,
    )  # fmt: skip
    local_pod_runner.wait_for_pid(namespace, "evicted-1", timeout=30)
    wl = _workload(api_client, namespace, "evicted") or {}
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        queueing.GROUP, queueing.VERSION, namespace, "workloads", wl["metadata"]["name"],
        {"spec": {"active": False}},
    )  # fmt: skip
    wait_for(
        "the Workload evicted",
        lambda: _wl_condition(api_client, namespace, "evicted", "Evicted").get("status") == "True",
    )
    wait_for("the lease suspended", lambda: store.get(namespace, "evicted").record.suspended, 30)
    _unlabel(api_client, namespace, "evicted")
    time.sleep(2.0)
    assert _alive(api_client, namespace, "evicted")  # the pod lives out its grace period ...
    assert _workload(api_client, namespace, "evicted") is not None  # ... and its Workload stays
    assert _wl_condition(api_client, namespace, "evicted", "QuotaReserved")["status"] == "True"
    wait_for("Succeeded", phase_is(api_client, namespace, "evicted", "Succeeded"), 90)
    assert _workload(api_client, namespace, "evicted") is None
    assert status(api_client, namespace, "evicted")["completion"]["fencingToken"] == 2
    wait_for(
        "the LocalQueue counting nothing",
        lambda: _local_queue_counts(kueue, namespace, queue.local_queue) in ((0, 0), (None, None)),
    )


def test_a_workload_marked_finished_by_hand_keeps_the_job_from_running(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """Jobframework stops a job whose Workload is finished: it is never admitted again."""
    queue = kueue.queue(namespace, {"cpu": "0"})
    create_job(
        api_client, namespace, "done-by-hand", "exec leasehold run -- true",
        lease_seconds=10, labels={QUEUE: queue.local_queue}, requests=REQUESTS,
    )  # fmt: skip
    wl = wait_for("its Workload", lambda: _workload(api_client, namespace, "done-by-hand"))
    finished = {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "by hand",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    conditions = (wl.get("status") or {}).get("conditions") or []
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        queueing.GROUP, queueing.VERSION, namespace, "workloads", wl["metadata"]["name"],
        {"status": {"conditions": [*conditions, finished]}},
    )  # fmt: skip
    told = wait_for(
        "told the Workload is finished",
        lambda: _suspended_because(api_client, namespace, "done-by-hand", "WorkloadFinished"),
        30,
    )
    assert told["status"] == "True"
    time.sleep(2.0)
    assert _pods(api_client, namespace, "done-by-hand") == []
    assert status(api_client, namespace, "done-by-hand")["phase"] == "Suspended"


def test_a_workload_of_the_jobs_name_owned_by_another_object_is_not_adopted(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """Jobframework finds a job's Workload by its owner: another's is neither used nor deleted."""
    queue = kueue.queue(namespace, {"cpu": "0"})
    create_job(
        api_client, namespace, "foreign", "exec leasehold run -- true",
        lease_seconds=10, labels={QUEUE: queue.local_queue}, requests=REQUESTS,
    )  # fmt: skip
    wl = wait_for("its Workload", lambda: _workload(api_client, namespace, "foreign"))
    other: Any = client.CoreV1Api(api_client).create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="other-owner"))
    )
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "other-owner",
             "uid": other.metadata.uid, "controller": True}  # fmt: skip
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        queueing.GROUP, queueing.VERSION, namespace, "workloads", wl["metadata"]["name"],
        {"metadata": {"ownerReferences": [owner]}},
    )  # fmt: skip
    _set_quota(kueue, queue.cluster_queue, "100m")  # Kueue admits that Workload
    wait_for(
        "the foreign Workload admitted",
        lambda: _wl_condition(api_client, namespace, "foreign", "Admitted").get("status") == "True",
    )
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        namespace,
        names.PLURAL_LEASED_JOBS,
        "foreign",
        {"metadata": {"annotations": {"example.com/poke": "1"}}},
    )  # fmt: skip  (a change of the job: a reconcile)
    told = wait_for(
        "told the Workload is not its own",
        lambda: _suspended_because(api_client, namespace, "foreign", "WorkloadNotOwned"),
        30,
    )
    assert told["status"] == "True"
    time.sleep(2.0)
    assert _pods(api_client, namespace, "foreign") == []
    assert (_workload(api_client, namespace, "foreign") or {})["metadata"]["uid"] == (
        wl["metadata"]["uid"]
    )  # not deleted either


def test_a_template_node_selector_conflicting_with_the_admitted_flavor_keeps_the_job_stopped(
    kueue: Kueue,
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """As jobframework's podset.Merge: a conflict is refused, never overwritten.

    Kueue admits no flavor that conflicts with the Workload's pod set, so the
    conflict comes from the template edited while the Workload was pending.
    """
    cluster_queue = _runner_flavor_queue(kueue, namespace, cpu="0")
    create_job(
        api_client, namespace, "conflict", "exec leasehold run -- true", lease_seconds=10,
        labels={QUEUE: "runner"}, requests=REQUESTS,
        pod_spec={"nodeSelector": {"leasehold.dev/podrunner": "true"}},
    )  # fmt: skip
    wait_for("its Workload", lambda: _workload(api_client, namespace, "conflict"))
    wait_for("Suspended", phase_is(api_client, namespace, "conflict", "Suspended"), 30)
    selector = {"nodeSelector": {"leasehold.dev/podrunner": "false"}}
    patch_spec(api_client, namespace, "conflict", {"template": {"spec": selector}})
    _set_quota(kueue, cluster_queue, "100m")
    wait_for(
        "the Workload admitted",
        lambda: (
            _wl_condition(api_client, namespace, "conflict", "Admitted").get("status") == "True"
        ),
    )
    told = wait_for(
        "told the admission cannot be applied",
        lambda: _suspended_because(api_client, namespace, "conflict", "AdmissionNotApplicable"),
        30,
    )
    assert "leasehold.dev/podrunner=false" in told["message"]
    events(api_client, namespace, "conflict", until=["AdmissionNotApplicable"])
    time.sleep(1.0)
    assert _pods(api_client, namespace, "conflict") == []
