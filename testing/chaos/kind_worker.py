"""The kind chaos run's worker (:mod:`chaos.kind`): :mod:`chaos.worker` in a pod on a real node.

Run by the operator's pods as ``python -m chaos.kind_worker`` in the chaos
image (the leasehold image with psycopg and ``testing/chaos`` added). The same
fenced writes and completion as :func:`chaos.worker.work`, keyed by the
pod's lease (``namespace/lease``) rather than its job: each index of an
Indexed job is a lease and a fencing domain of its own, and the judges
partition by lease. The history file (``CHAOS_HISTORY``) is on the node
(a hostPath volume); the run gathers every node's file at the end.
"""

from __future__ import annotations

import os
import sys

from chaos.worker import record, work
from leasehold.worker import LeaseHolder, LeaseLost


def main() -> int:
    """Work under the pod's lease; exit 0 when the completion was accepted, 75 otherwise."""
    history = os.environ["CHAOS_HISTORY"]
    try:
        holder = LeaseHolder.from_env().start()
    except LeaseLost as lost:
        record(
            history,
            kind="start-refused",
            reason=str(lost.reason),
            holder=os.environ.get("LEASEHOLD_HOLDER"),
        )
        return 75
    lease = f"{holder.namespace}/{holder.lease_name}"
    ok = work(holder, os.environ["CHAOS_DSN"], history, int(os.environ["CHAOS_WRITES"]), lease)
    holder.close()
    return 0 if ok else 75


if __name__ == "__main__":
    sys.exit(main())
