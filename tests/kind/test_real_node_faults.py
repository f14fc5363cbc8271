"""Faults of real nodes, on the kind cluster with the chart-installed operator (the kind tier).

A frozen node: the worker's node container is paused (``docker pause``, the
cgroup freezer: kubelet, containerd and the worker all stop) past the lease. The
operator reclaims the lease and the next attempt runs on another node under token
2; after ``docker unpause`` the frozen worker (examples/worker.py) wakes up and its
completion under token 1 is rejected by the lease store.

A partitioned node: the node drops everything to and from the control-plane node
(iptables in the node container: its kubelet and its pods). The next attempt runs
on another node before the node is even reported NotReady, and after the heal the
cut-off worker's completion under token 1 is never accepted (it is rejected, or
its retries ran out during the partition).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests.kind.kube import (
    NAMESPACE,
    LogFollower,
    condition_true,
    cordon,
    delete_job,
    get,
    operator_pods,
    phase,
    run,
    started_pod,
    wait,
)

pytestmark = [pytest.mark.kind, pytest.mark.timeout(45 * 60)]

LEASED_JOB = """
apiVersion: leasehold.dev/v1alpha1
kind: LeasedJob
metadata:
  name: {job}
spec:
  leaseDurationSeconds: 6
  maxAttempts: 3
  template:
    spec:
      serviceAccountName: leasehold-worker
      terminationGracePeriodSeconds: 30
      containers:
        - name: worker
          image: leasehold:0.1.0
          command: ["python", "/examples/worker.py"]
          env:
            - name: WORK_SECONDS
              value: "12"
          volumeMounts:
            - name: examples
              mountPath: /examples
      volumes:
        - name: examples
          configMap:
            name: worked-example
"""


def _node_ready(env: dict[str, str], node: str) -> str:
    return run(
        env,
        "kubectl",
        "get",
        "node",
        node,
        "-o",
        'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
    )


def _partition_rules(env: dict[str, str]) -> list[list[str]]:
    """Iptables rules cutting a node off the control-plane node (its kubelet and its pods)."""
    control_plane = f"{env['KIND_CLUSTER']}-control-plane"
    address = run(
        env,
        "docker",
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        control_plane,
    )
    return [[chain, "-d", address.strip(), "-j", "DROP"] for chain in ("OUTPUT", "FORWARD")]


def _stall(env: dict[str, str], fault: str, node: str) -> None:
    if fault == "frozen":
        run(env, "docker", "pause", node)
    else:
        for rule in _partition_rules(env):
            run(env, "docker", "exec", node, "iptables", "-I", *rule)


def _resume(env: dict[str, str], fault: str, node: str, check: bool = True) -> None:
    if fault == "frozen":
        run(env, "docker", "unpause", node, check=check)
    else:
        for rule in _partition_rules(env):
            run(env, "docker", "exec", node, "iptables", "-D", *rule, check=check)


@pytest.fixture(params=["frozen", "partitioned"])
def stalled_job(
    request: pytest.FixtureRequest, operator_env: dict[str, str]
) -> Iterator[dict[str, str]]:
    """The LeasedJob and its worker script; afterwards every node resumed and schedulable."""
    env = {**operator_env, "FAULT": request.param, "JOB": f"{request.param}-node"}
    configmap = run(
        env,
        "kubectl",
        "-n",
        NAMESPACE,
        "create",
        "configmap",
        "worked-example",
        "--from-file=worker.py=examples/worker.py",
        "--dry-run=client",
        "-o",
        "yaml",
    )
    run(env, "kubectl", "-n", NAMESPACE, "apply", "-f", "-", stdin=configmap)
    # The first attempt must not share a node with the operator (stalling that node
    # would stall the operator too): its node takes no new pods until then.
    operator_node = operator_pods(env)[0]["node"]
    try:
        cordon(env, operator_node)
        job = LEASED_JOB.format(job=env["JOB"])
        run(env, "kubectl", "-n", NAMESPACE, "delete", "ljob", env["JOB"], "--ignore-not-found")
        run(env, "kubectl", "-n", NAMESPACE, "apply", "-f", "-", stdin=job)
        yield {**env, "OPERATOR_NODE": operator_node}
    finally:
        for node in run(env, "kind", "get", "nodes", "--name", env["KIND_CLUSTER"]).split():
            _resume(env, request.param, node, check=False)
            run(env, "kubectl", "uncordon", node, check=False)
        delete_job(env, env["JOB"])


def test_stalled_node_lease_reclaimed_next_attempt_elsewhere_stale_completion_refused(
    stalled_job: dict[str, str],
) -> None:
    env = stalled_job
    fault, job = env["FAULT"], env["JOB"]
    first = wait("attempt 1's pod to run", 180, lambda: started_pod(env, job, 1))
    # Follow the first worker's log from now on: its pod is gone once it exits.
    follow = LogFollower(env, first["name"])
    wait("attempt 1 to start working", 60, lambda: follow.saw("fencing token 1"))
    assert first["node"] != env["OPERATOR_NODE"]

    _stall(env, fault, first["node"])
    # The node controller would taint the silent node only after its grace period;
    # cordoning it at once keeps the next attempt off it.
    cordon(env, first["node"])
    run(env, "kubectl", "uncordon", env["OPERATOR_NODE"])
    second = wait("attempt 2's pod to run", 120, lambda: started_pod(env, job, 2))
    assert second["node"] != first["node"]
    if fault == "partitioned":
        # Replaced without waiting for the node to be declared dead.
        assert _node_ready(env, first["node"]) == "True"
    # Decided once attempt 2 completed; the stalled attempt's pod keeps the
    # final condition waiting (as batch/v1 waits for its pods) until it ends.
    wait("the job to be decided", 120, lambda: condition_true(env, job, "SuccessCriteriaMet"))

    _resume(env, fault, first["node"])
    wait(
        "the stale worker to end",
        180,
        lambda: follow.ended() or follow.saw("REJECTED") or follow.saw("Error"),
    )
    time.sleep(1)
    log = follow.stop()
    print(f"the {fault} worker's log (attempt 1 on {first['node']}):\n{log}")
    # Nothing under token 1 was ever accepted.
    assert not re.search(r"^completed \S+ under fencing token 1", log, re.MULTILINE), log
    if fault == "frozen":
        assert "completion under fencing token 1 REJECTED by the lease store" in log, log
    wait("the job to succeed", 120, lambda: phase(env, job) == "Succeeded")
    lease = get(env, "jlease", job)
    assert lease["spec"]["fencingToken"] == 2
    assert lease["spec"]["completion"]["fencingToken"] == 2
    assert lease["spec"]["completion"]["outcome"] == "Succeeded"
