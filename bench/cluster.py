"""The run's control plane: start a fresh one, install the CRDs, stop it.

Why this module exists: every figure of a run is measured on one fresh
local control plane (``testing/localcluster``), so no part inherits another
run's objects, and it is stopped however the run ends.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from kubernetes import client

from bench.harness import PLURAL, REPO, G, Harness, V
from leasehold import names
from localcluster import LocalCluster, tools_bin_dir


@contextlib.contextmanager
def local_cluster(workdir: Path) -> Iterator[LocalCluster]:
    """A started local control plane under ``workdir/cluster``, stopped on exit."""
    cluster = LocalCluster(workdir / "cluster", stop_with_parent=True)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def install_crds(h: Harness) -> None:
    """Apply ``deploy/crds`` and wait until this API server serves JobLeases.

    Raises:
        subprocess.CalledProcessError: kubectl failed.
        kubernetes.client.ApiException: JobLeases not served after 30 s.
    """
    base = [str(tools_bin_dir() / "kubectl"), "--kubeconfig", str(h.kubeconfig)]
    subprocess.run(
        [*base, "apply", "--server-side", "-f", str(REPO / "deploy" / "crds")],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *base,
            "wait",
            "--for=condition=Established",
            f"crd/{names.PLURAL_JOB_LEASES}.{names.GROUP}",
            f"crd/{names.PLURAL_LEASED_JOBS}.{names.GROUP}",
        ],
        check=True,
        capture_output=True,
    )
    deadline = time.monotonic() + 30
    while True:  # Established is not yet "served by this API server's handlers"
        try:
            h.custom.list_namespaced_custom_object(G, V, "default", PLURAL, limit=1)
            break
        except client.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
