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

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "demo"
T = TypeVar("T")

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


def _run(env: dict[str, str], *args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(args, env=env, input=stdin, capture_output=True, text=True, cwd=REPO)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _wait(what: str, seconds: float, probe: Callable[[], T]) -> T:
    """Poll probe() every 0.5 s until it returns something truthy; fail after seconds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.5)
    pytest.fail(f"timed out after {seconds:g}s waiting for {what}")


@pytest.fixture(scope="module")
def operator_env(kind_env: dict[str, str]) -> dict[str, str]:
    """The cluster, image and chart as the quickstart leaves them (set up if it did not run)."""
    env = kind_env
    _run(env, "make", "-s", "kind-up")
    _run(env, "make", "-s", "image", "kind-load")
    if subprocess.run(
        ["helm", "status", "leasehold", "-n", "leasehold-system"], env=env, capture_output=True
    ).returncode:
        _run(env, "kubectl", "create", "namespace", NAMESPACE, check=False)
        _run(
            env,
            "helm",
            "install",
            "leasehold",
            "deploy/helm/leasehold",
            "-n",
            "leasehold-system",
            "--create-namespace",
            "--set",
            f"watchNamespaces={{{NAMESPACE}}}",
        )
    _run(
        env,
        "kubectl",
        "-n",
        "leasehold-system",
        "wait",
        "--for=condition=Available",
        "deployment",
        "-l",
        "app.kubernetes.io/instance=leasehold",
        "--timeout=300s",
    )
    return env


def _pod(env: dict[str, str], token: int) -> dict[str, str] | None:
    """The job's pod of one attempt (by its fencing-token label) once it runs: name, node."""
    out = _run(
        env,
        "kubectl",
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-o",
        "json",
        "-l",
        f"leasehold.dev/job={env['JOB']},leasehold.dev/fencing-token={token}",
    )
    for pod in json.loads(out)["items"]:
        if pod["status"].get("phase") == "Running":
            return {"name": pod["metadata"]["name"], "node": pod["spec"]["nodeName"]}
    return None


def _node_ready(env: dict[str, str], node: str) -> str:
    return _run(
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
    address = _run(
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
        _run(env, "docker", "pause", node)
    else:
        for rule in _partition_rules(env):
            _run(env, "docker", "exec", node, "iptables", "-I", *rule)


def _resume(env: dict[str, str], fault: str, node: str, check: bool = True) -> None:
    if fault == "frozen":
        _run(env, "docker", "unpause", node, check=check)
    else:
        for rule in _partition_rules(env):
            _run(env, "docker", "exec", node, "iptables", "-D", *rule, check=check)


@pytest.fixture(params=["frozen", "partitioned"])
def stalled_job(
    request: pytest.FixtureRequest, operator_env: dict[str, str]
) -> Iterator[dict[str, str]]:
    """The LeasedJob and its worker script; afterwards every node resumed and schedulable."""
    env = {**operator_env, "FAULT": request.param, "JOB": f"{request.param}-node"}
    configmap = _run(
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
    _run(env, "kubectl", "-n", NAMESPACE, "apply", "-f", "-", stdin=configmap)
    # The first attempt must not share a node with the operator (stalling that node
    # would stall the operator too): its node takes no new pods until then.
    operator_node = _run(
        env,
        "kubectl",
        "-n",
        "leasehold-system",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/instance=leasehold",
        "-o",
        "jsonpath={.items[0].spec.nodeName}",
    )
    try:
        _run(env, "kubectl", "cordon", operator_node)
        job = LEASED_JOB.format(job=env["JOB"])
        _run(env, "kubectl", "-n", NAMESPACE, "delete", "ljob", env["JOB"], "--ignore-not-found")
        _run(env, "kubectl", "-n", NAMESPACE, "apply", "-f", "-", stdin=job)
        yield {**env, "OPERATOR_NODE": operator_node}
    finally:
        for node in _run(env, "kind", "get", "nodes", "--name", env["KIND_CLUSTER"]).split():
            _resume(env, request.param, node, check=False)
            _run(env, "kubectl", "uncordon", node, check=False)
        _run(
            env,
            "kubectl",
            "-n",
            NAMESPACE,
            "delete",
            "ljob",
            env["JOB"],
            "--wait=false",
            check=False,
        )


def test_stalled_node_lease_reclaimed_next_attempt_elsewhere_stale_completion_refused(
    stalled_job: dict[str, str],
) -> None:
    env = stalled_job
    fault, job = env["FAULT"], env["JOB"]
    first = _wait("attempt 1's pod to run", 180, lambda: _pod(env, 1))
    assert first is not None
    # Follow the first worker's log from now on: its pod is gone once it exits.
    follow = subprocess.Popen(
        ["kubectl", "-n", NAMESPACE, "logs", "-f", first["name"]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(follow.stdout or []), daemon=True)
    reader.start()
    _wait("attempt 1 to start working", 60, lambda: any("fencing token 1" in ln for ln in lines))
    assert first["node"] != env["OPERATOR_NODE"]

    _stall(env, fault, first["node"])
    # The node controller would taint the silent node only after its grace period;
    # cordoning it at once keeps the next attempt off it.
    _run(env, "kubectl", "cordon", first["node"])
    _run(env, "kubectl", "uncordon", env["OPERATOR_NODE"])
    second = _wait("attempt 2's pod to run", 120, lambda: _pod(env, 2))
    assert second is not None
    assert second["node"] != first["node"]
    if fault == "partitioned":
        # Replaced without waiting for the node to be declared dead.
        assert _node_ready(env, first["node"]) == "True"
    phase = ("kubectl", "-n", NAMESPACE, "get", "ljob", job, "-o", "jsonpath={.status.phase}")
    _wait("the job to succeed", 120, lambda: _run(env, *phase) == "Succeeded")

    _resume(env, fault, first["node"])
    _wait(
        "the stale worker to end",
        180,
        lambda: follow.poll() is not None or any("REJECTED" in ln or "Error" in ln for ln in lines),
    )
    time.sleep(1)
    follow.terminate()
    log = "".join(lines)
    print(f"the {fault} worker's log (attempt 1 on {first['node']}):\n{log}")
    # Nothing under token 1 was ever accepted.
    assert not re.search(r"^completed \S+ under fencing token 1", log, re.MULTILINE), log
    if fault == "frozen":
        assert "completion under fencing token 1 REJECTED by the lease store" in log, log
    lease = json.loads(_run(env, "kubectl", "-n", NAMESPACE, "get", "jlease", job, "-o", "json"))
    assert lease["spec"]["fencingToken"] == 2
    assert lease["spec"]["completion"]["fencingToken"] == 2
    assert lease["spec"]["completion"]["outcome"] == "Succeeded"
