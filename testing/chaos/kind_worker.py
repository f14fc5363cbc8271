"""The kind chaos run's worker (:mod:`chaos.kind`): :mod:`chaos.worker` in a pod on a real node.

Run by the operator's pods as ``python -m chaos.kind_worker`` on the leasehold
image (psycopg and ``testing/chaos`` mounted from the node). The same fenced
writes and completion as :func:`chaos.worker.pod_main`, keyed by the pod's
lease (``namespace/lease``): each index of an Indexed job and each run of a
cron job is a lease and a fencing domain of its own, and the judges
partition by lease. The history file (``CHAOS_HISTORY``) is on the node (a
hostPath volume); the run gathers every node's file at the end.
"""

from __future__ import annotations

import sys

from chaos.worker import pod_main

if __name__ == "__main__":
    sys.exit(pod_main())
