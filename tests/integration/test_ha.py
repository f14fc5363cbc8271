"""Two operator replicas with Kopf peering: one works at a time, the other takes over."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.conftest import REPO, _kubectl_bin
from tests.integration.jobs import create_job, phase_is, run, wait_for


@pytest.fixture
def peering(crds_installed: Path, api_client: client.ApiClient, namespace: str) -> str:
    """Kopf's peering CRDs and a KopfPeering object for the test namespace."""
    applied = subprocess.run(
        [
            str(_kubectl_bin()),
            "--kubeconfig",
            str(crds_installed),
            "apply",
            "--server-side",
            "-f",
            str(REPO / "deploy" / "helm" / "leasehold" / "crds" / "kopf-peering.yaml"),
        ],
        capture_output=True,
        text=True,
    )
    if applied.returncode != 0:
        pytest.fail(f"applying the peering CRDs failed:\n{applied.stderr}")
    subprocess.run(
        [
            str(_kubectl_bin()),
            "--kubeconfig",
            str(crds_installed),
            "wait",
            "--for=condition=Established",
            "crd/kopfpeerings.kopf.dev",
        ],
        capture_output=True,
        check=True,
    )
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "kopf.dev",
        "v1",
        namespace,
        "kopfpeerings",
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "leasehold"}},
    )
    return "leasehold"


@pytest.fixture
def replicas(
    crds_installed: Path, namespace: str, tmp_path: Path, worker_rbac: None, peering: str
) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    high = OperatorProcess(
        crds_installed, namespace, tmp_path / "high.log", peering=peering, priority=200
    )
    low = OperatorProcess(
        crds_installed, namespace, tmp_path / "low.log", peering=peering, priority=100
    )
    try:
        high.start()
        low.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield high, low
    high.stop()
    low.stop()


def started_pods(op: OperatorProcess) -> int:
    return op.logs().count("started pod")


def test_one_active_replica_and_failover(
    replicas: tuple[OperatorProcess, OperatorProcess],
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    high, low = replicas
    time.sleep(3)  # both replicas have announced themselves in the KopfPeering
    for name in ("a", "b", "c"):
        create_job(api_client, namespace, name, run(0.2))
    for name in ("a", "b", "c"):
        wait_for("Succeeded", phase_is(api_client, namespace, name, "Succeeded"), 60)
    assert started_pods(high) == 3, high.logs()
    assert started_pods(low) == 0, low.logs()
    # The active replica goes away (a graceful stop, as in a rolling update).
    high.stop()
    create_job(api_client, namespace, "after", run(0.2))
    wait_for("Succeeded", phase_is(api_client, namespace, "after", "Succeeded"), 90)
    assert started_pods(low) == 1, low.logs()
