"""An Indexed LeasedJob of 1,000 indexes run to completion: time, operator CPU, API writes.

Why this module exists: issue 15 asks what one index costs the operator and
the API server. ``python -m bench.indexed [--completions N] [--parallelism P]``
starts a fresh local control plane and an operator, creates a pull-mode
Indexed job, and lets a pool of worker threads in this process claim each
index's lease and complete it at once (no pods: the figures are the
operator's and the leases', not a kubelet's). It reports the wall time,
the operator's CPU seconds, and the API requests by verb and resource over
the run, per index; the pool's own writes (one claim, one complete per
index) are counted apart.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.cluster import install_crds, local_cluster
from bench.harness import (
    QUICK,
    WRITE_VERBS,
    Harness,
    all_requests,
    apiserver_samples,
    log,
    new_client,
    sched_seconds,
)
from leasehold import names
from leasehold.lease.errors import StoreError
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, LeaseStore
from operatorproc import OperatorProcess

JOB = "big"


def _pool(
    kubeconfig: Path, namespace: str, who: str, stop: threading.Event, done: Counter[str]
) -> None:
    """One worker: list the job's open index leases, claim one, complete it; until stopped."""
    api = new_client(kubeconfig)
    store = LeaseStore(api)
    selector = f"{names.LABEL_JOB}={JOB}"
    while not stop.is_set():
        try:
            leases = store.list_leases(namespace, label_selector=selector)
        except StoreError:
            time.sleep(0.2)
            continue
        open_leases = [
            lease
            for lease in leases
            if not lease.record.held
            and lease.record.completion is None
            and (lease.record.max_fencing_token or 1) > lease.record.fencing_token
        ]
        if not open_leases:
            time.sleep(0.1)
            continue
        lease = open_leases[hash(who) % len(open_leases)]
        claimed = store.claim(namespace, lease.name, who, observed=lease)
        done["claim requests"] += 1
        if not isinstance(claimed, Accepted):
            continue
        result = store.complete(namespace, lease.name, who, claimed.token, Outcome.SUCCEEDED)
        done["complete requests"] += 1
        if isinstance(result, Accepted):
            done["completed"] += 1
    api.close()


def run(completions: int, parallelism: int, workers: int) -> dict[str, Any]:
    """Run one Indexed job of ``completions`` indexes; returns the figures."""
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-indexed-") as tmp:
        workdir = Path(tmp)
        with local_cluster(workdir) as cluster:
            h = Harness(cluster, workdir, QUICK)
            install_crds(h)
            namespace = h.namespace("indexed")
            op = OperatorProcess(h.kubeconfig, namespace, workdir / "operator.log")
            op.start()
            try:
                assert op.proc is not None
                body = {
                    "apiVersion": names.API_VERSION,
                    "kind": "LeasedJob",
                    "metadata": {"name": JOB},
                    "spec": {
                        "leaseDurationSeconds": 300,
                        "completions": completions,
                        "parallelism": parallelism,
                        "completionMode": "Indexed",
                    },
                }
                before = apiserver_samples(h.admin)
                cpu0 = sched_seconds(op.proc.pid)[0]
                t0 = time.monotonic()
                h.custom.create_namespaced_custom_object(
                    names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, body
                )
                stop = threading.Event()
                counts: Counter[str] = Counter()
                threads = [
                    threading.Thread(
                        target=_pool, args=(h.kubeconfig, namespace, f"w{i}", stop, counts)
                    )
                    for i in range(workers)
                ]
                for t in threads:
                    t.start()
                phase = None
                while phase != "Succeeded":
                    time.sleep(0.5)
                    got: Any = h.custom.get_namespaced_custom_object(
                        names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, JOB
                    )
                    status = got.get("status") or {}
                    phase = status.get("phase")
                    if time.monotonic() - t0 > 1800:
                        raise RuntimeError(
                            f"not done after 30 min: {status.get('completionProgress')}"
                        )
                elapsed = time.monotonic() - t0
                stop.set()
                for t in threads:
                    t.join()
                cpu = sched_seconds(op.proc.pid)[0] - cpu0
                after = apiserver_samples(h.admin)
            finally:
                op.stop()
    requests = all_requests(before, after)
    writes = Counter({k: v for k, v in requests.items() if k.split(" ", 1)[0] in WRITE_VERBS})
    pool_writes = counts["claim requests"] + counts["complete requests"]
    total_writes = sum(writes.values())
    return {
        "completions": completions,
        "parallelism": parallelism,
        "workers": workers,
        "seconds": elapsed,
        "operator_cpu_seconds": cpu,
        "completedIndexes": status.get("completedIndexes"),
        "writes": dict(writes),
        "writes_per_index": total_writes / completions,
        "operator_writes_per_index": (total_writes - pool_writes) / completions,
        "pool_writes_per_index": pool_writes / completions,
        "requests_per_index": sum(requests.values()) / completions,
        "pool": dict(counts),
    }


def main() -> None:
    """Parse the options, run, print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.indexed", description=__doc__)
    parser.add_argument("--completions", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    log(f"indexed job: {args.completions} indexes, parallelism {args.parallelism}")
    figures = run(args.completions, args.parallelism, args.workers)
    for key, value in figures.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
