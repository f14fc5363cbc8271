"""Measure the time from a lease's expiry to its reclaim by the operator.

Starts a local control plane and the operator (or uses ``--kubeconfig``),
creates N pull-mode LeasedJobs, claims each lease once and never renews it.
A lease expires ``leaseDurationSeconds`` after its last change; this prints,
per lease and in summary (median, p90, max), how long after that moment the
operator's reclaim was seen through a watch. The operator's margin
(``--expiry-margin-seconds``, default 1 s) is part of the figure by design.

Usage: PYTHONPATH=hack .venv/bin/python hack/measure_reclaim.py [--leases 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from leasehold.store import Accepted, LeaseNotFoundError, LeaseStore
from localcluster import LocalCluster, tools_bin_dir
from operatorproc import OperatorProcess


def main() -> int:
    """Run the measurement and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--leases", type=int, default=20, help="how many leases (default 20)")
    parser.add_argument("--duration", type=int, default=2, help="lease duration, seconds")
    parser.add_argument("--margin", type=float, default=1.0, help="operator expiry margin")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with LocalCluster(work / "cluster") as cluster:
            kubeconfig = cluster.kubeconfig
            kubectl = str(tools_bin_dir() / "kubectl")
            repo = Path(__file__).resolve().parents[1]
            subprocess.run(
                [
                    kubectl,
                    "--kubeconfig",
                    str(kubeconfig),
                    "apply",
                    "--server-side",
                    "-f",
                    str(repo / "deploy" / "crds"),
                ],
                check=True,
                capture_output=True,
            )
            subprocess.run(
                [
                    kubectl,
                    "--kubeconfig",
                    str(kubeconfig),
                    "wait",
                    "--for=condition=Established",
                    "crd/jobleases.leasehold.dev",
                    "crd/leasedjobs.leasehold.dev",
                ],
                check=True,
                capture_output=True,
            )
            subprocess.run(
                [kubectl, "--kubeconfig", str(kubeconfig), "create", "ns", "m"],
                check=True,
                capture_output=True,
            )
            op = OperatorProcess(kubeconfig, "m", work / "operator.log", args.margin)
            op.start()
            try:
                return measure(kubeconfig, args.leases, args.duration, args.margin)
            finally:
                op.stop()


def measure(kubeconfig: Path, n: int, duration: int, margin: float) -> int:
    """Claim ``n`` leases, watch them get reclaimed, print the figures."""
    api = config.new_client_from_config(config_file=str(kubeconfig))
    custom = client.CustomObjectsApi(api)
    store = LeaseStore(api)
    for i in range(n):
        custom.create_namespaced_custom_object(
            "leasehold.dev",
            "v1alpha1",
            "m",
            "leasedjobs",
            {
                "apiVersion": "leasehold.dev/v1alpha1",
                "kind": "LeasedJob",
                "metadata": {"name": f"j{i}"},
                "spec": {"leaseDurationSeconds": duration, "maxAttempts": 5},
            },
        )
    for i in range(n):
        while True:
            try:
                store.get("m", f"j{i}")
                break
            except LeaseNotFoundError:
                time.sleep(0.05)
    time.sleep(1.0)  # the operator's own first writes settle
    reclaimed: dict[str, float] = {}
    done = threading.Event()

    def watcher() -> None:
        stream = watch.Watch()
        for event in stream.stream(
            custom.list_namespaced_custom_object,
            "leasehold.dev",
            "v1alpha1",
            "m",
            "jobleases",
            timeout_seconds=120,
        ):
            obj: Any = event["object"]
            spec = obj["spec"]
            name = obj["metadata"]["name"]
            if spec.get("fencingToken") == 1 and not spec.get("holderIdentity"):
                reclaimed.setdefault(name, time.monotonic())
            if len(reclaimed) == n:
                break
        done.set()

    threading.Thread(target=watcher, daemon=True).start()
    time.sleep(0.5)
    claimed_at: dict[str, float] = {}
    for i in range(n):
        result = store.claim("m", f"j{i}", f"w{i}")
        assert isinstance(result, Accepted), result
        claimed_at[f"j{i}"] = time.monotonic()  # the change has landed by now
        time.sleep(0.05)
    done.wait(timeout=duration + margin + 60)
    lags = sorted(reclaimed[k] - (claimed_at[k] + duration) for k in claimed_at if k in reclaimed)
    missing = n - len(lags)
    print(f"leases: {n}, duration {duration}s, operator margin {margin:g}s, missing: {missing}")
    print("time from expiry (last change + duration) to reclaim seen, seconds:")
    print(
        f"  min {lags[0]:.3f}  median {statistics.median(lags):.3f}  "
        f"p90 {lags[int(0.9 * (len(lags) - 1))]:.3f}  max {lags[-1]:.3f}"
    )
    print(
        f"  minus the margin: median {statistics.median(lags) - margin:.3f}"
        f"  max {lags[-1] - margin:.3f}"
    )
    api.close()
    return 0 if missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
