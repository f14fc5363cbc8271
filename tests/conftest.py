"""Shared fixtures: a real control plane (``localcluster``) with the CRDs installed."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client, config

from leasehold.lease.store import LeaseStore
from operatorproc import OperatorProcess

pytest_plugins = [
    "localcluster.pytest_plugin",
    "podrunner.pytest_plugin",
    "pgserver.pytest_plugin",
    "kueueproc.pytest_plugin",
]

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
    for _ in range(20):
        waited = subprocess.run(
            [
                kubectl,
                *env_args,
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/leasedjobs.leasehold.dev",
                "crd/jobleases.leasehold.dev",
                "crd/leasedcronjobs.leasehold.dev",
            ],
            capture_output=True,
            text=True,
        )
        # A CRD created a moment ago may have no status.conditions yet, and
        # kubectl wait then fails at once instead of waiting: ask again.
        if waited.returncode == 0 or "accessor error" not in waited.stderr:
            break
        time.sleep(0.5)
    if waited.returncode != 0:
        pytest.fail(f"CRDs did not become Established:\n{waited.stderr}")
    return kubeconfig


@pytest.fixture(scope="session")
def worker_cluster_role(crds_installed: Path) -> str:
    """The worker ClusterRole from deploy/rbac/, applied to the cluster."""
    kubectl = str(_kubectl_bin())
    applied = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(crds_installed),
            "apply",
            "--server-side",
            "-f",
            str(REPO / "deploy" / "rbac" / "worker-clusterrole.yaml"),
        ],
        capture_output=True,
        text=True,
    )
    if applied.returncode != 0:
        pytest.fail(f"applying the worker ClusterRole failed:\n{applied.stderr}")
    return "leasehold-worker"


@pytest.fixture
def worker_rbac(api_client: client.ApiClient, worker_cluster_role: str, namespace: str) -> None:
    """Bind the worker ClusterRole to the test namespace's default service account."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "leasehold-worker"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": worker_cluster_role,
        },
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    }
    client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
        namespace, cast(Any, binding)
    )


@pytest.fixture(scope="session")
def api_client(crds_installed: Path) -> Iterator[client.ApiClient]:
    """An admin ``kubernetes.client.ApiClient`` for the test cluster."""
    api = config.new_client_from_config(config_file=str(crds_installed))
    yield api
    api.close()


@pytest.fixture
def operator_env() -> dict[str, str]:
    """Extra environment of the ``operator`` fixture's process (a module may override it)."""
    return {}


@pytest.fixture
def operator(
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    worker_rbac: None,
    operator_env: dict[str, str],
) -> Iterator[OperatorProcess]:
    """A running operator watching the test's namespace; its log is shown on failure."""
    proc = OperatorProcess(crds_installed, namespace, tmp_path / "operator.log", env=operator_env)
    try:
        proc.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield proc
    proc.stop()


OPERATOR_LOG_LINES_ON_FAILURE = 150
"""Lines of an operator's log a failed test shows (the end of it)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that ran an operator shows the end of that operator's log.

    The log is in the test's ``tmp_path``, which on a CI machine is gone
    with the run: the report is the only place a reader can see why the
    operator did what it did.
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, OperatorProcess):
            lines = value.logs().splitlines()[-OPERATOR_LOG_LINES_ON_FAILURE:]
            report.sections.append(
                (f"operator log, last {len(lines)} lines ({value.log_path})", "\n".join(lines))
            )


@pytest.fixture
def store(api_client: client.ApiClient) -> LeaseStore:
    """The lease store on the test cluster, as the operator and workers use it."""
    return LeaseStore(api_client)
