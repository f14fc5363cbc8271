"""Tests of the pod runner (``testing/podrunner``), the stand-in kubelet, on a real control plane.

Pods are created without ``nodeName``: the real kube-scheduler must bind them
to the runner's node. Run with::

    .venv/bin/pytest testing/tests/integration/test_podrunner.py

(``testing/tests/conftest.py`` registers the cluster and pod runner fixtures.)

Tests that take ``local_pod_runner`` reach into the pod processes, so they
fail (never skip) against a real cluster from ``LEASEHOLD_TEST_KUBECONFIG``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from localcluster import Kubectl, tools_bin_dir
from podrunner import CAPACITY, LEASE_NAMESPACE, PodRunner, expand, read_pid

T = TypeVar("T")

IMAGE = "busybox:1.36"
"""Ignored by the pod runner; lets the same pods run on a cluster with real kubelets."""


def eventually(check: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
    """Poll ``check`` until it returns something other than None."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)


def make_pod(
    name: str,
    command: list[str],
    *,
    env: list[dict[str, Any]] | None = None,
    grace: int | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": IMAGE, "command": command}
    if env:
        container["env"] = env
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = kubectl.json(
        "create", "-n", namespace, "-f", "-", input=json.dumps(manifest)
    )
    return created


def get_pod(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    out = kubectl("get", "pod", name, "-n", namespace, "--ignore-not-found", "-o", "json").stdout
    return json.loads(out) if out.strip() else None


def wait_for_phase(
    kubectl: Kubectl, namespace: str, name: str, phases: set[str], timeout: float = 20.0
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pod = get_pod(kubectl, namespace, name)
        if pod is not None and pod.get("status", {}).get("phase") in phases:
            return pod
        return None

    return eventually(check, f"pod {namespace}/{name} to reach {sorted(phases)}", timeout)


def pod_log(kubectl: Kubectl, runner: PodRunner | None, namespace: str, name: str) -> str:
    if runner is not None:
        return runner.log(namespace, name)
    return kubectl("logs", name, "-n", namespace).stdout


def process_state(pid: int) -> str | None:
    """Return the state letter of a process (R, S, T, Z, ...), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    return process_state(pid) not in (None, "Z")


def count_lines(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("exit_code", "phase", "reason"),
    [(3, "Failed", "Error"), (0, "Succeeded", "Completed")],
    ids=["exit-3", "exit-0"],
)
def test_pod_runs_with_its_env_and_reports_its_exit(
    kubectl: Kubectl,
    namespace: str,
    pod_runner: PodRunner | None,
    exit_code: int,
    phase: str,
    reason: str,
) -> None:
    env: list[dict[str, Any]] = [
        {"name": "MY_VAR", "value": "hello-from-env"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    manifest = make_pod(
        "envpod", ["sh", "-c", f"echo $MY_VAR $POD_NAME; exit {exit_code}"], env=env
    )
    create(kubectl, namespace, manifest)

    pod = wait_for_phase(kubectl, namespace, "envpod", {"Succeeded", "Failed"})

    if pod_runner is not None:
        assert pod["spec"]["nodeName"] == pod_runner.node_name, "the scheduler bound it elsewhere"
    status = pod["status"]
    assert status["phase"] == phase
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == exit_code
    assert terminated["reason"] == reason
    assert pod_log(kubectl, pod_runner, namespace, "envpod") == "hello-from-env envpod\n"


@pytest.mark.cluster
def test_pod_without_command_fails_with_a_clear_message(
    kubectl: Kubectl, namespace: str, local_pod_runner: PodRunner
) -> None:
    manifest = make_pod("nocommand", ["unused"])
    del manifest["spec"]["containers"][0]["command"]
    create(kubectl, namespace, manifest)

    pod = wait_for_phase(kubectl, namespace, "nocommand", {"Failed", "Succeeded", "Running"})

    assert pod["status"]["phase"] == "Failed"
    assert "has no command" in pod["status"]["message"]


@pytest.mark.cluster
def test_process_authenticates_with_a_token_bound_to_its_pod(
    kubectl: Kubectl, namespace: str, local_pod_runner: PodRunner
) -> None:
    kubectl_bin = tools_bin_dir() / "kubectl"
    created = create(
        kubectl,
        namespace,
        make_pod("whoami", [str(kubectl_bin), "auth", "whoami", "-o", "json"]),
    )

    pod = wait_for_phase(kubectl, namespace, "whoami", {"Succeeded", "Failed"})

    output = local_pod_runner.log(namespace, "whoami")
    assert pod["status"]["phase"] == "Succeeded", output
    user = json.loads(output)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:default"
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["whoami"]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [created["metadata"]["uid"]]
    pod_dir = local_pod_runner.pod_dir(namespace, "whoami")
    assert pod_dir is not None
    assert (pod_dir / "serviceaccount" / "namespace").read_text() == namespace
    assert (pod_dir / "serviceaccount" / "token").read_text().count(".") == 2  # a JWT


@pytest.mark.cluster
def test_pause_freezes_the_process_and_resume_lets_it_go_on(
    kubectl: Kubectl, namespace: str, local_pod_runner: PodRunner, tmp_path: Path
) -> None:
    ticks = tmp_path / "ticks"
    script = 'while true; do echo tick >> "$TICKS"; sleep 0.1; done'
    create(
        kubectl,
        namespace,
        make_pod("ticker", ["sh", "-c", script], env=[{"name": "TICKS", "value": str(ticks)}]),
    )
    pid = local_pod_runner.wait_for_pid(namespace, "ticker", timeout=20)
    assert read_pid(local_pod_runner.workdir, namespace, "ticker") == pid
    try:
        eventually(lambda: True if count_lines(ticks) >= 3 else None, "the first ticks", 10)

        local_pod_runner.pause(namespace, "ticker")
        time.sleep(0.3)  # a write already under way may still land
        # Stopped: T. A process in uninterruptible sleep (D, a write waiting on
        # a busy disk) takes the stop when that sleep ends.
        eventually(lambda: True if process_state(pid) == "T" else None, "the pod stopped", 10)
        paused = count_lines(ticks)
        time.sleep(1.0)
        assert count_lines(ticks) == paused, "the file grew while the pod was paused"
        pod = get_pod(kubectl, namespace, "ticker")
        assert pod is not None
        assert pod["status"]["phase"] == "Running"

        local_pod_runner.resume(namespace, "ticker")
        eventually(
            lambda: True if count_lines(ticks) >= paused + 3 else None, "ticks after resume", 5
        )
        # Running again: R, S, or D (a write waiting on a busy disk), not stopped (T).
        assert process_state(pid) in ("R", "S", "D")
    finally:
        if local_pod_runner.pid(namespace, "ticker") is not None:
            local_pod_runner.kill(namespace, "ticker", signal.SIGKILL)


@pytest.mark.cluster
def test_pause_and_kill_reach_every_process_of_the_pod(
    kubectl: Kubectl, namespace: str, local_pod_runner: PodRunner, tmp_path: Path
) -> None:
    """A process that left the pod's process group and session is still the pod's."""
    ticks, pids = tmp_path / "ticks", tmp_path / "pids"
    loop = 'while true; do echo {who} >> "$TICKS"; sleep 0.05; done'
    daemon = tmp_path / "daemon.sh"
    daemon.write_text(f'echo $$ >> "$PIDS"\n{loop.format(who="daemon")}\n')
    # "$$$$": the API server turns "$$" into "$".
    script = f'setsid sh "{daemon}" & echo $$$$ >> "$PIDS"; {loop.format(who="main")}'
    env = [{"name": "TICKS", "value": str(ticks)}, {"name": "PIDS", "value": str(pids)}]
    create(kubectl, namespace, make_pod("spread", ["sh", "-c", script], env=env))
    local_pod_runner.wait_for_pid(namespace, "spread", timeout=20)
    found = eventually(
        lambda: (
            [int(p) for p in pids.read_text().split()]
            if pids.exists() and len(pids.read_text().split()) == 2
            else None
        ),
        "both processes",
        10,
    )
    try:
        eventually(lambda: True if count_lines(ticks) >= 6 else None, "the first ticks", 10)
        local_pod_runner.pause(namespace, "spread")
        # Both stopped: T (one in uninterruptible sleep, D, takes the stop when
        # its write on a busy disk ends; as in test_pause_stops_the_pod above).
        eventually(
            lambda: True if [process_state(pid) for pid in found] == ["T", "T"] else None,
            "both processes stopped",
            10,
        )
        time.sleep(0.3)  # a write already under way may still land
        paused = count_lines(ticks)
        time.sleep(0.5)
        assert count_lines(ticks) == paused, "a process of the pod kept running while paused"
        local_pod_runner.resume(namespace, "spread")
        local_pod_runner.kill(namespace, "spread", signal.SIGKILL)
        eventually(
            lambda: True if not any(alive(pid) for pid in found) else None,
            "every process of the pod to end",
            5,
        )
    finally:
        for pid in found:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("script", "grace", "exit_code"),
    [
        ("exec sleep 300", None, 128 + signal.SIGTERM),
        # 6 s: the check at its middle has 3 s of slack for a stalled test process.
        ("trap '' TERM; while true; do sleep 0.1; done", 6, 128 + signal.SIGKILL),
    ],
    ids=["stops-on-sigterm", "ignores-sigterm"],
)
def test_deleting_a_pod_kills_its_process_and_removes_the_pod(
    kubectl: Kubectl,
    namespace: str,
    local_pod_runner: PodRunner,
    script: str,
    grace: int | None,
    exit_code: int,
) -> None:
    create(kubectl, namespace, make_pod("victim", ["sh", "-c", script], grace=grace))
    pid = local_pod_runner.wait_for_pid(namespace, "victim", timeout=20)
    wait_for_phase(kubectl, namespace, "victim", {"Running"})

    deleted_at = time.monotonic()
    kubectl("delete", "pod", "victim", "-n", namespace, "--wait=false")

    if grace is not None:
        time.sleep(grace / 2)
        assert alive(pid), "SIGKILL came before the grace period ended"
    eventually(lambda: True if not alive(pid) else None, f"pid {pid} to end", 10)
    eventually(
        lambda: True if get_pod(kubectl, namespace, "victim") is None else None,
        "the pod object to disappear",
        10,
    )
    assert local_pod_runner.wait_for_exit(namespace, "victim", timeout=5) == exit_code
    assert time.monotonic() - deleted_at < (grace or 0) + 8


@pytest.mark.cluster
def test_node_is_ready_and_its_lease_is_renewed(
    kubectl: Kubectl, local_pod_runner: PodRunner
) -> None:
    node_name = local_pod_runner.node_name
    node = kubectl.json("get", "node", node_name)

    conditions = {c["type"]: c for c in node["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    for resource in ("cpu", "memory", "pods"):
        assert node["status"]["capacity"][resource] == CAPACITY[resource]
        assert node["status"]["allocatable"][resource] == CAPACITY[resource]
    taints = {taint["key"] for taint in node["spec"].get("taints") or []}
    assert "node.kubernetes.io/not-ready" not in taints
    assert "node.kubernetes.io/unreachable" not in taints

    lease = kubectl.json("get", "lease", node_name, "-n", LEASE_NAMESPACE)
    assert lease["spec"]["holderIdentity"] == node_name
    first_renewal = lease["spec"]["renewTime"]

    def renewed() -> str | None:
        again = kubectl.json("get", "lease", node_name, "-n", LEASE_NAMESPACE)
        renew_time: str = again["spec"]["renewTime"]
        return renew_time if renew_time != first_renewal else None

    eventually(renewed, "the node lease to be renewed", local_pod_runner.heartbeat_interval * 2.5)


def test_expand_follows_kubernetes_rules() -> None:
    variables = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)", variables) == "x-y"
    assert expand("$(MISSING)", variables) == "$(MISSING)"
    assert expand("$$(A)", variables) == "$(A)"
    assert expand("cost: $5 $(A", variables) == "cost: $5 $(A"
    assert expand("$", variables) == "$"


def test_cli_help_describes_the_runner() -> None:
    harness = Path(__file__).resolve().parents[2]  # testing/
    result = subprocess.run(
        [sys.executable, "-m", "podrunner", "--help"],
        capture_output=True,
        text=True,
        cwd=harness,
        env={**os.environ, "PYTHONPATH": str(harness)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for flag in ("--kubeconfig", "--workdir", "--node"):
        assert flag in result.stdout
