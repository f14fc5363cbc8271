"""A gone Indexed job's index leases are stopped for good, even when the cache lags a renewal.

Issue 29 review: :meth:`IndexedActor.retire` now reads the job's index
leases from the lease watch's cache. A renewal that landed after the
cache's version makes the stop (conditioned on that version) refused, and
the refusal was dropped: the lease of a deleted job stayed held and
claimable past its token (its renewals bring no reconcile, so nothing
tried again until the lease ended on its own).
"""

from __future__ import annotations

from kubernetes import client

from leasehold import names
from leasehold.controller.runtime import Actors
from leasehold.lease.protocol import lease_is_final
from leasehold.lease.store import Accepted, LeaseStore


def test_retire_stops_an_index_lease_renewed_after_the_cache_saw_it(
    api_client: client.ApiClient, store: LeaseStore, namespace: str
) -> None:
    store.create(
        namespace,
        "gone.0",
        job_name="gone",
        lease_duration_seconds=30,
        labels={names.LABEL_JOB: "gone", names.LABEL_COMPLETION_INDEX: "0"},
        job_uid="0a1b2c3d-0000-4000-8000-00000000000a",
    )
    claimed = store.claim(namespace, "gone.0", "worker")
    assert isinstance(claimed, Accepted)
    actors = Actors.connect(api_client)
    cache = actors.ctx.lease_cache
    cache.put(claimed.lease.body)  # what the lease watch delivered so far
    cache.watched = True
    # A renewal whose watch event has not reached the cache yet:
    renewed = store.renew(namespace, "gone.0", "worker", claimed.token)
    assert isinstance(renewed, Accepted)

    actors.jobs.indexed.retire(namespace, "gone")

    lease = store.get(namespace, "gone.0")
    assert lease_is_final(lease.record), (
        f"the gone job's index lease is still held by {lease.record.holder_identity}"
        f" at token {lease.record.fencing_token} (cap {lease.record.max_fencing_token})"
    )
