"""A short chaos run on real nodes (``make chaos-kind``, smaller): node faults, then 0 violations.

The chart's operator and the workers run on the kind cluster's nodes; the
run freezes and partitions nodes, stops kubelets, kills the operator and
restarts the API server and etcd over plain, suspended and Indexed jobs, and
both checkers (the project's and porcupine) must find the history correct.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.kind.kube import NAMESPACE, REPO

pytestmark = [pytest.mark.kind, pytest.mark.timeout(12 * 60)]

NODE_FAULTS = ("node-freeze", "node-partition", "kubelet-stop")


def test_short_kind_chaos_run_has_no_violations(
    operator_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    env = operator_env
    keep = tmp_path_factory.mktemp("chaos-kind") / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos.kind",
            "--seed",
            "7",
            "--cluster",
            env["KIND_CLUSTER"],
            "--namespace",
            NAMESPACE,
            "--jobs",
            "6",
            "--concurrency",
            "6",
            "--minutes",
            "1",
            "--drain-minutes",
            "4",
            # No cron jobs: a run needs its minute boundary and outlasts it; make chaos-kind
            # runs them (bench/chaos.md), this CI run keeps its time.
            "--cron-policies",
            "none",
            "--keep",
            str(keep),
        ],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO / "testing")},
        capture_output=True,
        text=True,
        timeout=11 * 60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "0 violations" in output
    assert "checkers agree: yes" in output  # the project's checker and porcupine
    faults = output.split("faults injected:", 1)[1].split("operations:", 1)[0]
    assert any(kind in faults for kind in NODE_FAULTS), faults
    operations = output.split("operations:", 1)[1].split("violations:", 1)[0]
    assert "complete accepted" in operations, operations
    assert "write accepted" in operations, operations
