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

Inside: :mod:`~leasehold.worker.holder` (the holder API),
:mod:`~leasehold.worker.renewer` (the renewal engine),
:mod:`~leasehold.worker.timing` (deadline arithmetic),
:mod:`~leasehold.worker.pull` (claims), :mod:`~leasehold.worker.connection`
(the store and its API client).
"""

from leasehold.lease.errors import LeaseNotFoundError, StoreError, TransientStoreError
from leasehold.lease.leaseops import Accepted, LeaseOperations, Rejected, Result, StoredLease
from leasehold.lease.protocol import FencingToken, HolderIdentity, Outcome, Rejection
from leasehold.worker.errors import LeaseEnvironmentError, LeaseLost, LossReason
from leasehold.worker.holder import LeaseHolder, LossCallback
from leasehold.worker.pull import claim, claim_any
from leasehold.worker.timing import LeaseTiming

__all__ = [
    "Accepted",
    "FencingToken",
    "HolderIdentity",
    "LeaseEnvironmentError",
    "LeaseHolder",
    "LeaseLost",
    "LeaseNotFoundError",
    "LeaseOperations",
    "LeaseTiming",
    "LossCallback",
    "LossReason",
    "Outcome",
    "Rejected",
    "Rejection",
    "Result",
    "StoreError",
    "StoredLease",
    "TransientStoreError",
    "claim",
    "claim_any",
]
