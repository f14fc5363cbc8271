"""The lease core: the pure rules, the resources, and the store that writes them.

Why this package exists: the worker SDK and the operator both hold, renew,
complete and reclaim leases; the rules they follow and the one place that
writes a JobLease live here, below both, so neither re-implements them.

* :mod:`~leasehold.lease.protocol` — the lease rules as pure functions
  (no Kubernetes import: tested exhaustively);
* :mod:`~leasehold.lease.api` — ``JobLease``, ``LeasedJob`` and
  ``LeasedCronJob`` as pydantic models, one module per kind: the single
  source of truth for the CRDs (:mod:`~leasehold.lease.api.crds` generates
  them);
* :mod:`~leasehold.lease.store` — each lease operation as one atomic write
  to the API server, the only code that writes JobLeases;
* :mod:`~leasehold.lease.kubeclient` — the API client, found the way a pod
  finds its cluster;
* :mod:`~leasehold.lease.waits` — waits that still work under libfaketime;
* :mod:`~leasehold.lease.schedule` — when a ``LeasedCronJob``'s run is due
  (pure).
"""
