"""One leasehold candidate for the hand-over benchmark (``bench/handover.py``).

Why this module exists: it is leasehold's counterpart of client-go's leader
election candidate (``hack/leaderelect``): it waits on a watch of one
JobLease until the lease is unheld, claims it with the worker SDK
(:func:`leasehold.worker.pull.claim`, which renews it in the background),
prints ``leading <unix-nanos>``, and exits 0 when it loses the lease.

Usage: ``python -m bench.handover_candidate NAMESPACE LEASE IDENTITY``
(``KUBECONFIG`` set).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from kubernetes import client, config, watch

from leasehold import names
from leasehold.worker.pull import claim


def main(argv: list[str]) -> int:
    """Campaign for the lease ``argv = [namespace, lease, identity]``; returns the exit code."""
    namespace, lease, identity = argv
    api = config.new_client_from_config()
    custom = client.CustomObjectsApi(api)
    lost = threading.Event()
    while True:
        stream = watch.Watch()
        for event in stream.stream(
            custom.list_namespaced_custom_object,
            names.GROUP,
            names.VERSION,
            namespace,
            names.PLURAL_JOB_LEASES,
            field_selector=f"metadata.name={lease}",
            timeout_seconds=60,
        ):
            obj: Any = event["object"]
            if obj.get("spec", {}).get("holderIdentity"):
                continue
            holder = claim(namespace, lease, identity, on_lost=lambda _loss: lost.set())
            if holder is None:
                continue
            print(f"leading {time.time_ns()}", flush=True)
            lost.wait()
            print(f"stopped {time.time_ns()}", flush=True)
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
