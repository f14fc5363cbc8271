"""Queued by a real Kueue on kind (issue 30): quota, preemption with fencing, Indexed parallelism.

Kueue v0.17.0 is built here from the Go module proxy and installed from its
own chart (``kueue_env``: ``make kueue-install``) with LeasedJob as an
external framework. The chart's operator creates a ``Workload`` for each
LeasedJob labelled ``kueue.x-k8s.io/queue-name`` and runs the job only while
Kueue admits it. One ClusterQueue with quota for one job (``cpu: 300m``;
each single job asks for all of it):

- two queued jobs: the second waits (a pending Workload, no pod, its lease
  never claimed) until the first finishes, then runs;
- a higher-priority job preempts a running one whose node is frozen (its
  worker stalled mid-write): the preempted job is suspended (its lease
  released: token 1 is stale), the preemptor runs, the preempted job is
  re-admitted and resumes under token 2; when the frozen node wakes, the
  stalled worker's write is refused by the fenced target (which token 2
  reached first) and its completion under token 1 by the lease store;
- an Indexed job is admitted with its parallelism (three pods of 100m).

Kueue's own status agrees: the Workloads' conditions and the LocalQueue's
pending/admitted counts (``kubectl get workloads,localqueues`` is printed).
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kind.kube import (
    IMAGE,
    NAMESPACE,
    LogFollower,
    apply,
    delete_job,
    get,
    operator_pods,
    phase,
    pods,
    run,
    started_pod,
    wait,
)

pytestmark = [pytest.mark.kind, pytest.mark.timeout(20 * 60)]

KUEUE = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "leasehold-kind"
LOCAL_QUEUE = "team"
QUOTA_CPU = "300m"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
LOW, HIGH = "leasehold-low", "leasehold-high"
WORKER = Path(__file__).with_name("fenced_worker.py")
TARGET, REPORT = "kueue-fenced-target", "kueue-worker-report"
# A job's lease outlives the job (its name's fencing domain): fresh names, tokens from 1.
RUN = secrets.token_hex(2)
FIRST, SECOND, PREEMPTED, PREEMPTOR, INDEXED = (
    f"{n}-{RUN}" for n in ("queued-first", "queued-second", "preempted", "preemptor", "indexed")
)
JOBS = (FIRST, SECOND, PREEMPTED, PREEMPTOR, INDEXED)


def _kueue_objects() -> list[dict[str, Any]]:
    flavor = {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default"}}
    cluster_queue = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [{"name": "cpu", "nominalQuota": QUOTA_CPU}],
                        }
                    ],
                }
            ],
        },
    }
    local_queue = {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": NAMESPACE},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }
    classes = [
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in ((LOW, 100), (HIGH, 1000))
    ]
    return [flavor, cluster_queue, local_queue, *classes]


@pytest.fixture(scope="module")
def queue_env(kueue_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Kueue installed, the queue objects made; every job of this module deleted afterwards."""
    env = kueue_env
    for obj in _kueue_objects():
        run(env, "kubectl", "apply", "--server-side", "-f", "-", stdin=json.dumps(obj))
    try:
        yield env
    finally:
        for job in JOBS:
            delete_job(env, job)


def queued_job(
    name: str,
    script: str,
    *,
    cpu: str = QUOTA_CPU,
    priority: str | None = None,
    **spec: Any,
) -> str:
    """A queued LeasedJob manifest whose container runs ``leasehold run -- sh -c SCRIPT``."""
    labels = {QUEUE_LABEL: LOCAL_QUEUE, **({PRIORITY_LABEL: priority} if priority else {})}
    container = {
        "name": "worker",
        "image": IMAGE,
        "command": ["leasehold", "run", "--", "sh", "-c", script],
        "resources": {"requests": {"cpu": cpu}},
    }
    template = {"spec": {"serviceAccountName": "leasehold-worker", "containers": [container]}}
    return json.dumps(
        {
            "apiVersion": "leasehold.dev/v1alpha1",
            "kind": "LeasedJob",
            "metadata": {"name": name, "labels": labels},
            "spec": {"leaseDurationSeconds": 30, "maxAttempts": 3, **spec, "template": template},
        }
    )


def workload_of(env: dict[str, str], job: str) -> dict[str, Any] | None:
    """The Workload a LeasedJob owns (the operator made it), or None."""
    out = run(env, "kubectl", "-n", NAMESPACE, "get", "workloads.kueue.x-k8s.io", "-o", "json")
    for wl in json.loads(out)["items"]:
        if any(
            o["kind"] == "LeasedJob" and o["name"] == job
            for o in wl["metadata"].get("ownerReferences", [])
        ):
            found: dict[str, Any] = wl
            return found
    return None


def wl_condition(env: dict[str, str], job: str, type_: str) -> dict[str, Any]:
    """One condition of the job's Workload ({} when there is none yet)."""
    wl = workload_of(env, job) or {}
    return next((c for c in wl.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def job_condition(env: dict[str, str], job: str, type_: str) -> dict[str, Any]:
    """One condition of the LeasedJob ({} when there is none yet)."""
    status = get(env, "ljob", job).get("status", {})
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def job_events(env: dict[str, str], job: str, reason: str) -> list[str]:
    """The messages of the LeasedJob's Events with ``reason``."""
    out = run(
        env,
        *("kubectl", "-n", NAMESPACE, "get", "events", "-o", "json"),
        f"--field-selector=involvedObject.kind=LeasedJob,involvedObject.name={job},reason={reason}",
    )
    return [e["message"] for e in json.loads(out)["items"]]


def queue_counts(env: dict[str, str]) -> tuple[int, int]:
    """The LocalQueue's (pendingWorkloads, admittedWorkloads)."""
    status = get(env, "localqueues.kueue.x-k8s.io", LOCAL_QUEUE).get("status", {})
    return int(status.get("pendingWorkloads", 0)), int(status.get("admittedWorkloads", 0))


def lease_spec(env: dict[str, str], job: str) -> dict[str, Any]:
    """The job's JobLease spec ({} while there is none)."""
    out = run(env, "kubectl", "-n", NAMESPACE, "get", "jlease", job, "-o", "json", check=False)
    return json.loads(out).get("spec", {}) if out else {}


def _finished(env: dict[str, str], job: str) -> bool:
    return wl_condition(env, job, "Finished").get("status") == "True"


def kueue_status(env: dict[str, str]) -> str:
    """``kubectl get workloads,localqueues`` in the demo namespace (for the transcript)."""
    return run(
        env, "kubectl", "-n", NAMESPACE, "get", "workloads,localqueues", "-o", "wide", check=False
    )


def test_kueue_queued_job_waits_for_quota_no_pod_no_claim_then_runs(
    queue_env: dict[str, str],
) -> None:
    env = queue_env
    apply(env, queued_job(FIRST, 'echo "token $LEASEHOLD_FENCING_TOKEN"; sleep 20'))
    wait("the first job's pod to run", 180, lambda: started_pod(env, FIRST, 1))
    assert wl_condition(env, FIRST, "Admitted").get("status") == "True"

    apply(env, queued_job(SECOND, 'echo "token $LEASEHOLD_FENCING_TOKEN"'))
    pending = wait(
        "the second job's Workload to be pending",
        60,
        lambda: (c := wl_condition(env, SECOND, "QuotaReserved")).get("status") == "False" and c,
    )
    assert pending["reason"] == "Pending", pending
    wait("the LocalQueue to count 1 pending, 1 admitted", 60, lambda: queue_counts(env) == (1, 1))
    print(f"while the first runs:\n{kueue_status(env)}")
    for _ in range(10):  # waiting: no pod, its lease never claimed
        assert not pods(env, f"leasehold.dev/job={SECOND}")
        assert not lease_spec(env, SECOND).get("holderIdentity")
        time.sleep(1)
    suspended = job_condition(env, SECOND, "Suspended")
    assert (suspended.get("status"), suspended.get("reason")) == ("True", "WaitingForAdmission"), (
        suspended
    )

    wait("the first job to succeed", 120, lambda: phase(env, FIRST) == "Succeeded")
    wait("the second job's pod to run", 120, lambda: started_pod(env, SECOND, 1))
    wait("the second job to succeed", 120, lambda: phase(env, SECOND) == "Succeeded")
    for job in (FIRST, SECOND):
        wait(f"{job}'s Workload Finished", 60, functools.partial(_finished, env, job))
        assert lease_spec(env, job)["completion"]["fencingToken"] == 1
    wait("the LocalQueue to count nothing", 60, lambda: queue_counts(env) == (0, 0))
    print(f"after both:\n{kueue_status(env)}")


def _fenced_target(env: dict[str, str]) -> None:
    """The fencing policy, the fenced ConfigMap, the report ConfigMap, the worker script, RBAC."""
    run(env, "kubectl", "apply", "-f", "deploy/fencing/validatingadmissionpolicy.yaml")
    for name in (TARGET, REPORT):
        run(env, "kubectl", "-n", NAMESPACE, "delete", "configmap", name, "--ignore-not-found")
    target = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": TARGET, "labels": {"leasehold.dev/fenced": "true"}},
        "data": {},
    }
    report = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": REPORT}, "data": {}}
    for obj in (target, report):
        run(env, "kubectl", "-n", NAMESPACE, "create", "-f", "-", stdin=json.dumps(obj))
    script = run(
        env,
        *("kubectl", "-n", NAMESPACE, "create", "configmap", "kueue-fenced-worker"),
        *(f"--from-file=fenced_worker.py={WORKER}", "--dry-run=client", "-o", "yaml"),
    )
    run(env, "kubectl", "-n", NAMESPACE, "apply", "-f", "-", stdin=script)
    # The target's own credentials: a ServiceAccount with a token Secret (not bound to a pod).
    writer = "kueue-target-writer"
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": writer}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                "name": f"{writer}-token",
                "annotations": {"kubernetes.io/service-account.name": writer},
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": writer},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [TARGET, REPORT],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": writer},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": writer},
            "subjects": [{"kind": "ServiceAccount", "name": writer, "namespace": NAMESPACE}],
        },
    ]
    for obj in objs:
        run(env, "kubectl", "-n", NAMESPACE, "apply", "-f", "-", stdin=json.dumps(obj))
    wait(
        "the target writer's token",
        60,
        lambda: (get(env, "secret", f"{writer}-token").get("data") or {}).get("token"),
    )
    time.sleep(2)  # a policy binding takes about a second to be active


def fenced_job(name: str, priority: str) -> str:
    """A queued LeasedJob running fenced_worker.py (the SDK, no ``leasehold run``)."""
    container = {
        "name": "worker",
        "image": IMAGE,
        "command": ["python", "/scripts/fenced_worker.py"],
        "env": [
            {"name": "TARGET", "value": TARGET},
            {"name": "REPORT", "value": REPORT},
            {"name": "TOKEN_1_SECONDS", "value": "900"},
            {"name": "WORK_SECONDS", "value": "4"},
            {"name": "TARGET_CREDENTIALS", "value": "/target-credentials"},
        ],
        "resources": {"requests": {"cpu": QUOTA_CPU}},
        "volumeMounts": [
            {"name": "scripts", "mountPath": "/scripts"},
            {"name": "target-credentials", "mountPath": "/target-credentials", "readOnly": True},
        ],
    }
    template = {
        "spec": {
            "serviceAccountName": "leasehold-worker",
            "terminationGracePeriodSeconds": 30,
            "containers": [container],
            "volumes": [
                {"name": "scripts", "configMap": {"name": "kueue-fenced-worker"}},
                {
                    "name": "target-credentials",
                    "secret": {"secretName": "kueue-target-writer-token"},
                },
            ],
        }
    }
    return json.dumps(
        {
            "apiVersion": "leasehold.dev/v1alpha1",
            "kind": "LeasedJob",
            "metadata": {
                "name": name,
                "labels": {QUEUE_LABEL: LOCAL_QUEUE, PRIORITY_LABEL: priority},
            },
            "spec": {"leaseDurationSeconds": 10, "maxAttempts": 3, "template": template},
        }
    )


@pytest.fixture
def frozen_node_env(queue_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The fenced target set up; the operator's node cordoned until the test uncordons it.

    Afterwards every node is unpaused and schedulable again.
    """
    env = queue_env
    _fenced_target(env)
    operator_node = operator_pods(env)[0]["node"]
    run(env, "kubectl", "cordon", operator_node)
    try:
        yield {**env, "OPERATOR_NODE": operator_node}
    finally:
        for node in run(env, "kind", "get", "nodes", "--name", env["KIND_CLUSTER"]).split():
            run(env, "docker", "unpause", node, check=False)
            run(env, "kubectl", "uncordon", node, check=False)


def test_kueue_preemption_suspends_fenced_stale_write_and_completion_refused_resumes_higher_token(
    frozen_node_env: dict[str, str],
) -> None:
    env = frozen_node_env
    apply(env, fenced_job(PREEMPTED, LOW))
    first = wait("the low-priority job's pod to run", 180, lambda: started_pod(env, PREEMPTED, 1))
    assert first["node"] != env["OPERATOR_NODE"]
    follow = LogFollower(env, first["name"])
    wait(
        "its first fenced write",
        60,
        lambda: follow.saw("first write under fencing token 1 accepted"),
    )

    # Its node freezes mid-work: a write of token 1 is in flight from here on.
    run(env, "docker", "pause", first["node"])
    run(env, "kubectl", "cordon", first["node"])
    run(env, "kubectl", "uncordon", env["OPERATOR_NODE"])

    # The preemptor is a job of its own (its own lease: another fencing domain); it
    # writes nothing to the target, which the preempted job's resumed run reaches.
    apply(
        env,
        queued_job(
            PREEMPTOR, 'echo "preemptor token $LEASEHOLD_FENCING_TOKEN"; sleep 3', priority=HIGH
        ),
    )
    evicted = wait(
        "Kueue to preempt the low-priority Workload",
        120,
        lambda: (c := wl_condition(env, PREEMPTED, "Evicted")).get("status") == "True" and c,
    )
    assert evicted["reason"] == "Preempted", evicted
    wait(
        "the preempted job's lease released (token 1 stale)",
        60,
        lambda: not lease_spec(env, PREEMPTED).get("holderIdentity"),
    )
    told = wait("a Preempted Event on the job", 60, lambda: job_events(env, PREEMPTED, "Preempted"))
    print(f"the operator told: {told}")
    assert lease_spec(env, PREEMPTED)["fencingToken"] == 1
    # Its pod cannot end on the frozen node, and the operator gives the quota back
    # to Kueue only once no pod of the job is left: remove it as one would a pod
    # of a dead node. The worker in it runs on when the node wakes.
    run(
        env,
        "kubectl",
        "-n",
        NAMESPACE,
        "delete",
        "pod",
        first["name"],
        "--force",
        "--grace-period=0",
    )
    wait("the preemptor's pod to run", 180, lambda: started_pod(env, PREEMPTOR, 1))
    print(f"preemptor admitted:\n{kueue_status(env)}")
    wait("the preemptor to succeed", 120, lambda: phase(env, PREEMPTOR) == "Succeeded")
    second = wait(
        "the preempted job to resume under token 2", 180, lambda: started_pod(env, PREEMPTED, 2)
    )
    assert second["node"] != first["node"]
    wait("the resumed job to succeed", 120, lambda: phase(env, PREEMPTED) == "Succeeded")
    target = get(env, "configmap", TARGET)["metadata"]["annotations"]
    assert target["leasehold.dev/fencing-token"] == "2", target

    # The frozen worker wakes: its write in flight, then its completion, both under token 1.
    run(env, "docker", "unpause", first["node"])
    reported = wait(
        "the stale worker's refused write and completion in the report",
        120,
        lambda: (
            (d := get(env, "configmap", REPORT).get("data") or {}).get("token-1-completion") and d
        ),
        explain=lambda: f"the frozen worker's log so far:\n{''.join(follow.lines)}",
    )
    log = follow.stop()
    print(f"the frozen worker's log (token 1 on {first['node']}):\n{log}")
    print(f"its report: {reported}")
    assert reported["token-1-write"].startswith("REFUSED"), reported
    # Refused by the lease store (holder and token no longer match) or, the pod's
    # token having died with its pod, by the API server before the store is asked.
    assert reported["token-1-completion"].startswith(("REJECTED", "REFUSED")), reported
    assert (
        get(env, "configmap", TARGET)["metadata"]["annotations"]["leasehold.dev/fencing-token"]
        == "2"
    )
    lease = lease_spec(env, PREEMPTED)
    assert lease["fencingToken"] == 2, lease
    assert lease["completion"] == {**lease["completion"], "fencingToken": 2, "outcome": "Succeeded"}
    history = {
        a["fencingToken"]: a for a in get(env, "ljob", PREEMPTED)["status"]["attemptHistory"]
    }
    print(f"attempts: {history}")
    wait(
        "both Workloads Finished",
        60,
        lambda: all(
            wl_condition(env, j, "Finished").get("status") == "True" for j in (PREEMPTED, PREEMPTOR)
        ),
    )
    print(f"after:\n{kueue_status(env)}")


def test_kueue_indexed_job_admitted_with_its_parallelism(queue_env: dict[str, str]) -> None:
    env = queue_env
    job = INDEXED
    apply(
        env,
        queued_job(
            job,
            'echo "index $LEASEHOLD_COMPLETION_INDEX token $LEASEHOLD_FENCING_TOKEN"; sleep 20',
            cpu="100m",
            completionMode="Indexed",
            completions=3,
            parallelism=3,
        ),
    )
    admitted = wait(
        "the Indexed job's Workload admitted",
        120,
        lambda: (
            wl_condition(env, job, "Admitted").get("status") == "True" and workload_of(env, job)
        ),
    )
    pod_set = admitted["spec"]["podSets"][0]
    assert pod_set["count"] == 3, pod_set
    assignment = admitted["status"]["admission"]["podSetAssignments"][0]
    assert assignment["count"] == 3, assignment
    assert assignment["resourceUsage"]["cpu"] == QUOTA_CPU, assignment
    wait(
        "three index pods running at once",
        180,
        lambda: (
            len(
                [
                    p
                    for p in pods(env, f"leasehold.dev/job={job}")
                    if p["status"].get("phase") == "Running"
                ]
            )
            == 3
        ),
    )
    print(f"indexed admitted:\n{kueue_status(env)}")
    wait("the Indexed job to succeed", 180, lambda: phase(env, job) == "Succeeded")
    wait(
        "its Workload Finished",
        60,
        lambda: wl_condition(env, job, "Finished").get("status") == "True",
    )
