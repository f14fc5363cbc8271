"""Faults of real nodes, on the kind cluster with the chart-installed operator (the kind tier).

The frozen node: the worker's node container is paused (``docker pause``, the
cgroup freezer: kubelet, containerd and the worker all stop) past the lease. The
operator reclaims the lease and the next attempt runs on another node under token
2; after ``docker unpause`` the frozen worker (examples/worker.py) wakes up and its
completion under token 1 is rejected by the lease store.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "demo"
JOB = "frozen-node"
T = TypeVar("T")

pytestmark = [pytest.mark.kind, pytest.mark.timeout(45 * 60)]

LEASED_JOB = f"""
apiVersion: leasehold.dev/v1alpha1
kind: LeasedJob
metadata:
  name: {JOB}
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
        f"leasehold.dev/job={JOB},leasehold.dev/fencing-token={token}",
    )
    for pod in json.loads(out)["items"]:
        if pod["status"].get("phase") == "Running":
            return {"name": pod["metadata"]["name"], "node": pod["spec"]["nodeName"]}
    return None


@pytest.fixture
def frozen_job(operator_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The LeasedJob and its worker script; afterwards every node unpaused and schedulable."""
    env = operator_env
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
    # The first attempt must not share a node with the operator (freezing that node
    # would freeze the operator too): its node takes no new pods until then.
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
    _run(env, "kubectl", "cordon", operator_node)
    _run(env, "kubectl", "-n", NAMESPACE, "apply", "-f", "-", stdin=LEASED_JOB)
    yield {**env, "OPERATOR_NODE": operator_node}
    for node in _run(env, "kind", "get", "nodes", "--name", env["KIND_CLUSTER"]).split():
        subprocess.run(["docker", "unpause", node], env=env, capture_output=True)
        subprocess.run(["kubectl", "uncordon", node], env=env, capture_output=True)
    _run(env, "kubectl", "-n", NAMESPACE, "delete", "ljob", JOB, "--wait=false", check=False)


def test_frozen_node_lease_reclaimed_next_attempt_elsewhere_stale_completion_rejected(
    frozen_job: dict[str, str],
) -> None:
    env = frozen_job
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

    subprocess.run(["docker", "pause", first["node"]], env=env, check=True)
    # The node controller would taint the silent node only after its grace period;
    # cordoning it at once keeps the next attempt off it.
    _run(env, "kubectl", "cordon", first["node"])
    _run(env, "kubectl", "uncordon", env["OPERATOR_NODE"])
    second = _wait("attempt 2's pod to run", 120, lambda: _pod(env, 2))
    assert second is not None
    assert second["node"] != first["node"]
    _wait(
        "the job to succeed",
        120,
        lambda: (
            _run(
                env,
                "kubectl",
                "-n",
                NAMESPACE,
                "get",
                "ljob",
                JOB,
                "-o",
                "jsonpath={.status.phase}",
            )
            == "Succeeded"
        ),
    )

    subprocess.run(["docker", "unpause", first["node"]], env=env, check=True)
    _wait(
        "the frozen worker's rejected completion",
        120,
        lambda: any("REJECTED" in ln for ln in lines),
    )
    follow.terminate()
    log = "".join(lines)
    assert "completion under fencing token 1 REJECTED by the lease store" in log, log
    lease = json.loads(_run(env, "kubectl", "-n", NAMESPACE, "get", "jlease", JOB, "-o", "json"))
    assert lease["spec"]["fencingToken"] == 2
    assert lease["spec"]["completion"]["fencingToken"] == 2
    assert lease["spec"]["completion"]["outcome"] == "Succeeded"
