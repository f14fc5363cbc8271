"""Fixtures of the kind tier: one kind cluster per session, deleted at the end (KEEP=1 keeps it).

The tests share the cluster and the chart-installed operator. The README
quickstart runs first (it creates both, verbatim); the operator HA test runs
last (it scales the operator to two replicas and freezes a node).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kind.kube import (
    NAMESPACE,
    OPERATOR_NAMESPACE,
    OPERATOR_SELECTOR,
    QUICKSTART_RAN,
    run,
)

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "leasehold-kind-tier"
FIRST = "test_quickstart.py"
LAST = "test_operator_ha.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The quickstart first (it installs the chart as the README says), operator HA last."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return 0 if name == FIRST else 2 if name == LAST else 1

    items.sort(key=rank)


def _bin_dir(script: str) -> str:
    out = subprocess.run(
        [str(REPO / "hack" / script)], check=True, capture_output=True, text=True
    ).stdout
    return str(Path(out.strip().splitlines()[-1]))


@pytest.fixture(scope="session")
def kind_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The tier's environment: its KUBECONFIG, kubectl/helm/kind on PATH, DOCKER_HOST."""
    tools = _bin_dir("tools.sh")
    kind = str(Path(_bin_dir("kind/kind.sh")).parent)
    docker_host = subprocess.run(
        [str(REPO / "hack" / "docker" / "ensure.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    env = {
        **os.environ,
        "DOCKER_HOST": docker_host,
        "PATH": f"{tools}:{kind}:{os.environ['PATH']}",
        "KUBECONFIG": str(tmp_path_factory.mktemp("kind") / "kubeconfig"),
        "KIND_CLUSTER": CLUSTER,
    }
    yield env
    if not os.environ.get("KEEP"):
        subprocess.run(["make", "-s", "kind-down"], cwd=REPO, env=env, check=False)


@pytest.fixture(scope="session")
def operator_env(kind_env: dict[str, str]) -> dict[str, str]:
    """The cluster, image and chart as the quickstart leaves them (set up if it did not run)."""
    env = kind_env
    if not env.get(QUICKSTART_RAN):  # else the quickstart just did both
        run(env, "make", "-s", "kind-up")
        run(env, "make", "-s", "image", "kind-load")
    if subprocess.run(
        ["helm", "status", "leasehold", "-n", OPERATOR_NAMESPACE], env=env, capture_output=True
    ).returncode:
        run(env, "kubectl", "create", "namespace", NAMESPACE, check=False)
        run(
            env,
            "helm",
            "install",
            "leasehold",
            "deploy/helm/leasehold",
            "-n",
            OPERATOR_NAMESPACE,
            "--create-namespace",
            "--set",
            f"watchNamespaces={{{NAMESPACE}}}",
        )
    run(
        env,
        "kubectl",
        "-n",
        OPERATOR_NAMESPACE,
        "wait",
        "--for=condition=Available",
        "deployment",
        "-l",
        OPERATOR_SELECTOR,
        "--timeout=300s",
    )
    return env


@pytest.fixture(scope="session")
def kueue_env(operator_env: dict[str, str]) -> dict[str, str]:
    """``operator_env`` with Kueue installed: ``make kueue-install`` (hack/kueue/install.sh).

    Kueue v0.17.0 built here, from its own chart, the LeasedJob external
    framework configured; ready once its webhook answers. Idempotent: a
    kept cluster (KEEP=1) is upgraded in place.
    """
    run(operator_env, "make", "-s", "kueue-install")
    return operator_env
