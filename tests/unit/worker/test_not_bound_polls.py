"""While a push lease is not yet bound, a failing read must not speed up renewals."""

from __future__ import annotations

import time

import pytest

from leasehold.lease.protocol import FencingToken, HolderIdentity, LeaseRecord, Rejection
from leasehold.lease.store import Accepted, Rejected, Result, StoredLease
from leasehold.worker.errors import LeaseLost
from leasehold.worker.renewer import Renewer
from leasehold.worker.timing import LeaseTiming


def _stored() -> StoredLease:
    record = LeaseRecord(
        job_name="job",
        holder_identity=HolderIdentity("pod-a"),
        fencing_token=FencingToken(1),
        lease_duration_seconds=10,
    )
    return StoredLease("ns", "job", record, "1", 1, {})


def test_a_failing_read_while_not_bound_does_not_turn_the_wait_into_a_renewal_storm() -> None:
    """The claim has not landed and every read of the lease fails (a 429, a 500, RBAC).

    Before the reads, refused renewals were one retry interval apart (0.83 s
    for a 10 s lease): about 2 in 1.5 s. With the reads, a failed read ends
    the wait at once, so the next renewal follows 0.05 s later: ~25 in 1.5 s.
    """
    timing = LeaseTiming.for_duration(10)
    renews: list[float] = []
    started = time.monotonic()

    def renew(_timeout: float) -> Result:
        renews.append(time.monotonic())
        if time.monotonic() - started > 1.5:
            return Accepted(_stored())
        return Rejected(Rejection.NOT_BOUND, _stored())

    def read(_timeout: float) -> bool:
        raise RuntimeError("HTTP 429: too many requests")

    renewer = Renewer(
        renew, timing, key="ns/job", acquired_at=None, on_loss=lambda _loss: None, bound=read
    )
    try:
        renewer.confirm()
    except LeaseLost as exc:  # pragma: no cover - not the point
        pytest.fail(str(exc))
    slowest_before = 1.5 / timing.retry_interval_seconds + 2
    assert len(renews) <= slowest_before, (
        f"{len(renews)} renew requests in 1.5 s while the claim was late"
        f" (one per retry interval {timing.retry_interval_seconds:.2f} s would be"
        f" <= {slowest_before:.0f})"
    )
