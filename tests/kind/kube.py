"""Helpers of the kind tier: kubectl and docker calls, waits, the jobs' pods and logs.

Every call runs with the tier's environment (``kind_env``: its KUBECONFIG,
kubectl/helm/kind on PATH, DOCKER_HOST) in the repository.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "demo"
"""The namespace the chart's operator watches (the quickstart's)."""
OPERATOR_NAMESPACE = "leasehold-system"
OPERATOR_SELECTOR = "app.kubernetes.io/instance=leasehold"
QUICKSTART_RAN = "LEASEHOLD_KIND_QUICKSTART_RAN"
"""Set in the tier's environment by a passed quickstart: cluster up, image loaded, chart in."""
T = TypeVar("T")


def run(env: dict[str, str], *args: str, stdin: str | None = None, check: bool = True) -> str:
    """Run a command; return its stdout. Fails the test when it fails (unless check=False)."""
    done = subprocess.run(args, env=env, input=stdin, capture_output=True, text=True, cwd=REPO)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def wait(
    what: str,
    seconds: float,
    probe: Callable[[], T | None],
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll probe() every 0.5 s until it returns something truthy; fail after seconds.

    explain(), if given, says in the failure what the cluster looked like then.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.5)
    pytest.fail(f"timed out after {seconds:g}s waiting for {what}\n{explain() if explain else ''}")


def get(env: dict[str, str], kind: str, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    """One object as JSON (``kubectl get KIND NAME -o json``)."""
    got: dict[str, Any] = json.loads(
        run(env, "kubectl", "-n", namespace, "get", kind, name, "-o", "json")
    )
    return got


def apply(env: dict[str, str], manifest: str) -> None:
    """``kubectl apply`` a manifest in the demo namespace."""
    run(env, "kubectl", "-n", NAMESPACE, "apply", "-f", "-", stdin=manifest)


IMAGE = "leasehold:0.1.0"
"""The image ``make image`` builds and the quickstart loads into the nodes."""


def worker_job(name: str, script: str, **spec: Any) -> str:
    """A LeasedJob manifest (JSON) whose one container runs ``leasehold run -- sh -c SCRIPT``.

    Args:
        name: the job's name.
        script: the shell script the worker runs under its lease.
        spec: more ``spec`` fields (camelCase), e.g. ``leaseDurationSeconds=30``.

    Returns:
        The manifest, for :func:`apply`; the pod runs as the chart's worker account.
    """
    container = {
        "name": "worker",
        "image": IMAGE,
        "command": ["leasehold", "run", "--", "sh", "-c", script],
    }
    template = {"spec": {"serviceAccountName": "leasehold-worker", "containers": [container]}}
    return json.dumps(
        {
            "apiVersion": "leasehold.dev/v1alpha1",
            "kind": "LeasedJob",
            "metadata": {"name": name},
            "spec": {**spec, "template": template},
        }
    )


def fresh_job(env: dict[str, str], job: str) -> Iterator[dict[str, str]]:
    """A fixture body: no LeasedJob named ``job`` before the test, and none left after it."""
    run(env, "kubectl", "-n", NAMESPACE, "delete", "ljob", job, "--ignore-not-found")
    try:
        yield env
    finally:
        delete_job(env, job)


def delete_job(env: dict[str, str], job: str) -> None:
    """Delete a LeasedJob without waiting (its pods go with it)."""
    run(env, "kubectl", "-n", NAMESPACE, "delete", "ljob", job, "--wait=false", check=False)


def pods(env: dict[str, str], selector: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The pods matching a label selector."""
    out = run(env, "kubectl", "-n", namespace, "get", "pods", "-o", "json", "-l", selector)
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def started_pod(env: dict[str, str], job: str, token: int) -> dict[str, str] | None:
    """The job's pod of one attempt (by its fencing-token label) once it runs or ran: name, node.

    A pod that has already ended counts: a short command may finish between two polls.
    """
    for pod in pods(env, f"leasehold.dev/job={job},leasehold.dev/fencing-token={token}"):
        if pod["status"].get("phase") in ("Running", "Succeeded", "Failed"):
            return {"name": pod["metadata"]["name"], "node": pod["spec"]["nodeName"]}
    return None


def phase(env: dict[str, str], job: str) -> str:
    """The LeasedJob's status.phase ('' before the operator wrote one)."""
    return run(
        env, "kubectl", "-n", NAMESPACE, "get", "ljob", job, "-o", "jsonpath={.status.phase}"
    )


def condition_true(env: dict[str, str], job: str, type_: str) -> bool:
    """Whether the LeasedJob's condition ``type_`` is True.

    For batch/v1's interim ``SuccessCriteriaMet``/``FailureTarget``: the job is
    decided (its lease already stopped or completed); ``Complete``/``Failed``
    and the final phase follow once no pod of the job is left running, which
    a pod on a stalled node is until the node comes back (or the bound of its
    grace period plus 30 s).
    """
    found = run(
        env,
        *("kubectl", "-n", NAMESPACE, "get", "ljob", job),
        *("-o", f'jsonpath={{.status.conditions[?(@.type=="{type_}")].status}}'),
    )
    return found == "True"


def operator_pods(env: dict[str, str]) -> list[dict[str, str]]:
    """The chart's operator pods that run: name, node."""
    return [
        {"name": p["metadata"]["name"], "node": p["spec"]["nodeName"]}
        for p in pods(env, OPERATOR_SELECTOR, OPERATOR_NAMESPACE)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def worker_nodes(env: dict[str, str]) -> list[str]:
    """The cluster's nodes that take pods (the control-plane node is tainted)."""
    return sorted(
        n
        for n in run(env, "kind", "get", "nodes", "--name", env["KIND_CLUSTER"]).split()
        if not n.endswith("-control-plane")
    )


class LogFollower:
    """``kubectl logs -f`` of one pod, read in the background (the pod may be gone later).

    Args:
        env: the tier's environment.
        pod: the pod's name (in the demo namespace).
    """

    def __init__(self, env: dict[str, str], pod: str) -> None:
        self.lines: list[str] = []
        self._process = subprocess.Popen(
            ["kubectl", "-n", NAMESPACE, "logs", "-f", pod],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(
            target=lambda: self.lines.extend(self._process.stdout or []), daemon=True
        )
        self._reader.start()

    def saw(self, text: str) -> bool:
        """Whether a line read so far contains text."""
        return any(text in line for line in self.lines)

    def ended(self) -> bool:
        """Whether the log stream ended (the container exited)."""
        return self._process.poll() is not None

    def stop(self) -> str:
        """Stop following; return the log read."""
        if self._process.poll() is None:
            self._process.terminate()
        self._reader.join(timeout=5)
        return "".join(self.lines)


def cordon(env: dict[str, str], node: str) -> None:
    """``kubectl cordon`` a node, then wait until the scheduler has seen it.

    The scheduler reads nodes from its own watch cache: a pod created right
    after the cordon can still be placed on the node while that cache lags (a
    CI run after the chaos test's API server and etcd restarts put an evicted
    attempt's successor back on the node just drained). A probe pod pinned to
    the node (``nodeSelector`` on its hostname) proves it: the scheduler marks
    it ``Unschedulable`` once it sees the cordon; a probe it still binds to the
    node is deleted and tried again.
    """
    run(env, "kubectl", "cordon", node)
    probe = f"cordon-probe-{node}"[:63]
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": probe, "labels": {"leasehold.dev/cordon-probe": "true"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [{"name": "probe", "image": IMAGE, "command": ["true"]}],
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
            },
        }
    )

    def remove() -> None:
        run(
            env,
            *("kubectl", "-n", NAMESPACE, "delete", "pod", probe),
            *("--ignore-not-found", "--grace-period=0", "--force"),
            check=False,
        )

    def seen() -> bool:
        pod = get(env, "pod", probe)
        if pod["spec"].get("nodeName"):
            remove()  # bound by a scheduler that had not seen the cordon yet
            apply(env, manifest)
            return False
        return any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in pod["status"].get("conditions") or []
        )

    remove()
    apply(env, manifest)
    try:
        wait(f"the scheduler to see {node} cordoned", 60, seen)
    finally:
        remove()
