"""Shared fixtures: a real control plane (``localcluster``) with the CRDs installed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

pytest_plugins = ["localcluster.pytest_plugin"]

REPO = Path(__file__).resolve().parents[1]
CRD_DIR = REPO / "deploy" / "crds"


def _kubectl_bin() -> Path:
    out = subprocess.run(
        [str(REPO / "hack" / "tools.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(out.splitlines()[-1]) / "kubectl"


@pytest.fixture(scope="session")
def crds_installed(kubeconfig: Path) -> Path:
    """Apply deploy/crds/ to the cluster and wait until they are Established."""
    kubectl = str(_kubectl_bin())
    env_args = ["--kubeconfig", str(kubeconfig)]
    applied = subprocess.run(
        [kubectl, *env_args, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR)],
        capture_output=True,
        text=True,
    )
    if applied.returncode != 0:
        pytest.fail(f"kubectl apply of {CRD_DIR} failed:\n{applied.stderr}")
    waited = subprocess.run(
        [
            kubectl,
            *env_args,
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/leasedjobs.leasehold.dev",
            "crd/jobleases.leasehold.dev",
        ],
        capture_output=True,
        text=True,
    )
    if waited.returncode != 0:
        pytest.fail(f"CRDs did not become Established:\n{waited.stderr}")
    return kubeconfig


@pytest.fixture(scope="session")
def api_client(crds_installed: Path) -> Iterator[client.ApiClient]:
    """An admin ``kubernetes.client.ApiClient`` for the test cluster."""
    api = config.new_client_from_config(config_file=str(crds_installed))
    yield api
    api.close()
