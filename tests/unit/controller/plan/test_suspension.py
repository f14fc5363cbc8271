"""Suspend and resume: the pure decisions (reconcile) and the lease rule (protocol)."""

from __future__ import annotations

from leasehold.controller.plan import single as reconcile
from leasehold.controller.plan.single import Action
from leasehold.lease import protocol
from leasehold.lease.api import AttemptRecord, LeasedJobStatus, Phase
from leasehold.lease.protocol import FencingToken, HolderIdentity, Rejection
from tests.unit.controller.plan.test_single import NOW, job, lease


def _running(token: int) -> LeasedJobStatus:
    return LeasedJobStatus(
        phase=Phase.RUNNING,
        attempt_history=[AttemptRecord(fencing_token=token, pod_name=f"hello-{token}")],
    )


def test_suspending_a_running_job_ends_its_attempt_and_deletes_its_pods() -> None:
    j = job(suspend=True).model_copy(update={"status": _running(2)})
    p = reconcile.plan(j, lease(2, "hello-2"), now=NOW, pod_created_for_holder=True)
    assert p.action is Action.SUSPEND
    assert p.status.phase == Phase.SUSPENDED
    assert p.delete_pods_below_token == 3  # the suspended attempt's pod too
    assert p.status.attempt_history is not None
    assert p.status.attempt_history[-1].reason == "Suspended"
    assert p.status.holder_identity is None
    suspended = next(c for c in p.status.conditions or [] if c.type == "Suspended")
    assert (suspended.status, suspended.reason, suspended.observed_generation) == (
        "True",
        "JobSuspended",
        2,
    )
    assert [e.reason for e in p.events] == ["Suspended"]


def test_a_suspended_lease_stays_put_and_records_no_second_event() -> None:
    first = reconcile.plan(
        job(suspend=True), lease(1, suspended=True), now=NOW, pod_created_for_holder=False
    )
    assert first.action is Action.NONE
    again = reconcile.plan(
        job(suspend=True).model_copy(update={"status": first.status}),
        lease(1, suspended=True),
        now=NOW,
        pod_created_for_holder=False,
    )
    assert again.action is Action.NONE and again.events == []


def test_resuming_reopens_the_lease_then_claims_above_the_old_token() -> None:
    suspended = reconcile.plan(
        job(suspend=True), lease(1, suspended=True), now=NOW, pod_created_for_holder=False
    )
    j = job().model_copy(update={"status": suspended.status})
    assert (
        reconcile.plan(j, lease(1, suspended=True), now=NOW, pod_created_for_holder=False).action
        is Action.RESUME
    )
    p = reconcile.plan(j, lease(1), now=NOW, pod_created_for_holder=False)
    assert p.action is Action.CLAIM_AND_START and p.pod_name == "hello-2"
    resumed = next(c for c in p.status.conditions or [] if c.type == "Suspended")
    assert (resumed.status, resumed.reason) == ("False", "JobResumed")
    assert [e.reason for e in p.events] == ["Resumed"]


def test_suspensions_use_no_budget() -> None:
    # maxAttempts=1; two attempts were suspended (each raised the cap by one).
    p = reconcile.plan(
        job(maxAttempts=1),
        lease(2, suspensions=2, max_fencing_token=FencingToken(3)),
        now=NOW,
        pod_created_for_holder=False,
    )
    assert p.action is Action.CLAIM_AND_START


def test_the_protocol_releases_counts_and_refuses_claims_while_suspended() -> None:
    held = lease(4, "hello-4", max_fencing_token=FencingToken(5))
    decision = protocol.suspend(held)
    assert isinstance(decision, protocol.Allowed)
    after = decision.record
    assert (after.holder_identity, after.fencing_token, after.suspended) == (None, 4, True)
    assert (after.suspensions, after.max_fencing_token) == (1, 6)
    claim = protocol.claim(after, HolderIdentity("x"), NOW)
    assert isinstance(claim, protocol.Denied) and claim.rejection is Rejection.SUSPENDED
    unheld = protocol.suspend(lease(4, max_fencing_token=FencingToken(5)))
    assert isinstance(unheld, protocol.Allowed)
    assert (unheld.record.suspensions, unheld.record.max_fencing_token) == (0, 5)
