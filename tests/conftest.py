"""Shared fixtures: a real control plane (``localcluster``) with the CRDs installed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

pytest_plugins = ["localcluster.pytest_plugin", "podrunner.pytest_plugin"]

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


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """``leasehold operator`` as a real process, watching one namespace.

    Args:
        kubeconfig: the cluster's kubeconfig.
        namespace: the namespace to watch.
        log_path: where its output goes.
        margin_seconds: the expiry margin.
    """

    def __init__(
        self, kubeconfig: Path, namespace: str, log_path: Path, margin_seconds: float = 1.0
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.log_path = log_path
        self.margin_seconds = margin_seconds
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it and wait until its liveness endpoint answers."""
        import os
        import time
        import urllib.request

        port = _free_port()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                str(REPO / ".venv" / "bin" / "leasehold"),
                "operator",
                "--namespace",
                self.namespace,
                "--expiry-margin-seconds",
                str(self.margin_seconds),
                "--liveness-endpoint",
                f"http://127.0.0.1:{port}/healthz",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"operator exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        pytest.fail(f"operator did not become live in 30 s:\n{self.logs()}")

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        """SIGKILL it (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def logs(self) -> str:
        """Everything it printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def operator(
    crds_installed: Path, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """A running operator watching the test's namespace; its log is shown on failure."""
    proc = OperatorProcess(crds_installed, namespace, tmp_path / "operator.log")
    proc.start()
    yield proc
    proc.stop()
