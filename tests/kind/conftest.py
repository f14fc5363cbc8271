"""Fixtures of the kind tier: one kind cluster per session, deleted at the end (KEEP=1 keeps it)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "leasehold-kind-tier"


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
