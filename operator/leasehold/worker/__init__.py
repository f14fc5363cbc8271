"""The worker SDK: hold a lease, renew it, stop when it is lost — and ``leasehold run``.

Why this package exists: a worker must stop producing effects before the
operator may hand its job to someone else. This is everything a worker
imports; it needs ``kubernetes`` and ``pydantic`` only (no Kopf), so a
worker image installs ``pip install leasehold`` without the operator's
framework.

Push mode (the operator claimed the lease for this pod)::

    from leasehold.worker import LeaseHolder, Outcome

    holder = LeaseHolder.from_env().start()
    for item in work:
        holder.check()  # raises LeaseLost once the lease is gone
        write(item, fencing_token=holder.token)
    holder.complete(Outcome.SUCCEEDED)

Pull mode (a pool claims leases of LeasedJobs without a pod template):
:func:`claim` and :func:`claim_any`. Any language: ``leasehold run -- CMD``
(:mod:`leasehold.worker.run`).
"""

from leasehold.lease.protocol import FencingToken, HolderIdentity, Outcome, Rejection
from leasehold.lease.store import Accepted, Rejected, Result, StoredLease
from leasehold.worker.holder import (
    LeaseEnvironmentError,
    LeaseHolder,
    LeaseLost,
    LossReason,
    claim,
    claim_any,
)

__all__ = [
    "Accepted",
    "FencingToken",
    "HolderIdentity",
    "LeaseEnvironmentError",
    "LeaseHolder",
    "LeaseLost",
    "LossReason",
    "Outcome",
    "Rejected",
    "Rejection",
    "Result",
    "StoredLease",
    "claim",
    "claim_any",
]
