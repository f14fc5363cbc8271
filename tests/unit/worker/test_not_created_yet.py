"""A job's first lease is created held by its pod after the pod: a 404 at start-up waits.

The operator creates a job's first attempt's pod first and then the lease,
already claimed for that pod (docs/lifecycle.md, "A holder is a pod UID,
not a name"), so the pod's ``leasehold run`` may renew before the lease
exists. At start-up (:meth:`Renewer.confirm`) a lease not found is waited
for as a claim not yet landed: by reads, bounded by the same bound (the
window and one lease duration). After start-up a lease not found stays a loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.protocol import FencingToken, HolderIdentity, LeaseRecord
from leasehold.lease.store import Accepted, Result, StoredLease
from leasehold.worker.errors import LeaseLost, LossReason
from leasehold.worker.renewer import Renewer
from leasehold.worker.timing import LeaseTiming


def _stored() -> StoredLease:
    record = LeaseRecord(
        job_name="job",
        holder_identity=HolderIdentity("job-1"),
        fencing_token=FencingToken(1),
        lease_duration_seconds=10,
        holder_uid="uid-1",
    )
    return StoredLease("ns", "job", record, "1", 1, {})


class Lease:
    """A lease that exists only from ``created_after`` seconds on."""

    def __init__(self, created_after: float) -> None:
        self.start = time.monotonic()
        self.created_after = created_after
        self.renews = 0
        self.reads = 0

    def exists(self) -> bool:
        return time.monotonic() - self.start >= self.created_after

    def renew(self, _timeout: float) -> Result:
        self.renews += 1
        if not self.exists():
            raise LeaseNotFoundError("ns", "job")
        return Accepted(_stored())

    def bound(self, _timeout: float) -> bool:
        self.reads += 1
        return self.exists()  # the probe answers "not yet" for a 404 (LeaseHolder._bound_now)


def _renewer(lease: Lease, timing: LeaseTiming, on_loss: Callable[[LeaseLost], None]) -> Renewer:
    """A start-up renewer of ``lease`` (no claim seen yet), probing it with ``lease.bound``."""
    return Renewer(
        lease.renew,
        timing,
        key="ns/job",
        acquired_at=None,
        on_loss=on_loss,
        bound=lease.bound,
    )


def test_a_lease_not_created_yet_at_start_up_is_waited_for_by_reads() -> None:
    """The lease appears 0.3 s after the first renewal: confirmed, with reads, not renewals."""
    lease = Lease(created_after=0.3)
    losses: list[LeaseLost] = []
    renewer = _renewer(lease, LeaseTiming.for_duration(10), losses.append)
    confirmed = renewer.confirm()
    assert isinstance(confirmed, Accepted)
    assert not losses
    assert lease.renews == 2, lease.renews  # the 404, then the accepted one
    assert lease.reads >= 2  # 0.05 + 0.1 + 0.2 s apart until it exists
    assert renewer.confirm_reads == lease.reads


def test_a_lease_never_created_ends_the_start_up_after_a_duration_and_the_grace() -> None:
    """No renewal accepted within a lease duration and the start grace is a loss.

    Bounded as a late claim is; the grace is the operator's (one lease
    duration, at most 60 s: ``protocol.start_grace_seconds``).
    """
    lease = Lease(created_after=1e9)
    timing = LeaseTiming.for_duration(2)
    renewer = _renewer(lease, timing, lambda _lost: None)
    began = time.monotonic()
    with pytest.raises(LeaseLost) as lost:
        renewer.confirm()
    assert lost.value.reason is LossReason.DEADLINE_PASSED
    assert time.monotonic() - began == pytest.approx(2 + 2, abs=0.5)


def test_a_halted_confirm_ends_at_once_without_renewing_on() -> None:
    """A holder stopped from another thread: no renewal after the answer it dropped."""
    renews: list[float] = []
    renewer: Renewer

    def renew(_timeout: float) -> Result:
        renews.append(time.monotonic())
        renewer.halt()  # stopped while this renewal was on its way
        return Accepted(_stored())

    renewer = Renewer(
        renew, LeaseTiming.for_duration(60), key="ns/job", acquired_at=None,
        on_loss=lambda _: None,
    )  # fmt: skip
    with pytest.raises(LeaseLost) as lost:
        renewer.confirm()
    assert lost.value.reason is LossReason.ENDED
    assert len(renews) == 1


def test_a_confirm_accepted_after_its_window_is_renewed_again_not_started_on() -> None:
    """A confirm accepted after its window is renewed again, not started on.

    Its window counts from its request's start: closed on arrival (the thread
    was starved meanwhile), it holds nothing; another renewal opens one.
    """
    now = [0.0]
    renews: list[float] = []

    def renew(_timeout: float) -> Result:
        renews.append(now[0])
        if len(renews) == 1:
            now[0] += 1.5  # answered, but seen 1.5 s after it was sent: past the 1 s window
        return Accepted(_stored())

    timing = LeaseTiming.for_duration(2)
    assert timing.window_seconds == pytest.approx(1.0)
    renewer = Renewer(
        renew, timing, key="ns/job", acquired_at=None, on_loss=lambda _: None,
        monotonic=lambda: now[0],
    )  # fmt: skip
    renewer.confirm()
    assert renews == [0.0, 1.5]
    assert renewer.deadline == pytest.approx(2.5)  # the second renewal's window


def test_a_confirm_leaving_too_little_of_its_window_is_renewed_again() -> None:
    """The command must not start into a window about to close."""
    now = [0.0]
    renews: list[float] = []
    timing = LeaseTiming.for_duration(10)  # window 8 s
    left = [timing.window_seconds - 0.1, 0.0]  # the first seen 0.1 s before its deadline

    def renew(_timeout: float) -> Result:
        renews.append(now[0])
        now[0] += left[len(renews) - 1]
        return Accepted(_stored())

    renewer = Renewer(
        renew, timing, key="ns/job", acquired_at=None, on_loss=lambda _: None,
        monotonic=lambda: now[0],
    )  # fmt: skip
    assert renewer.confirm_left_seconds() > 0.1
    renewer.confirm()
    assert len(renews) == 2
    deadline = renewer.deadline
    assert deadline is not None and deadline - now[0] == pytest.approx(timing.window_seconds)


def test_a_confirm_slower_than_one_window_still_starts_within_the_grace() -> None:
    """No answer for longer than the window at start-up: the confirm goes on.

    (One window was the bound before.) The attempt starts.
    """
    lease = Lease(created_after=1.6)  # 404 until then: past the 1 s window of a 2 s lease
    renewer = _renewer(lease, LeaseTiming.for_duration(2), lambda _lost: None)
    assert isinstance(renewer.confirm(), Accepted)


def test_a_lease_gone_after_start_up_is_a_loss() -> None:
    """Once a renewal was accepted, a 404 is what it was: the lease was deleted."""
    lease = Lease(created_after=0.0)
    losses: list[LeaseLost] = []
    renewer = _renewer(lease, LeaseTiming.for_duration(10), losses.append)
    renewer.confirm()
    lease.created_after = 1e9  # gone from now on
    renewer.renew_once()
    assert [loss.reason for loss in losses] == [LossReason.LEASE_DELETED]
