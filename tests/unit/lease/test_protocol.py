"""Unit tests of the pure lease protocol (``docs/architecture.md``, "The protocol")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from leasehold.lease.protocol import (
    Allowed,
    Completion,
    Decision,
    Denied,
    FencingToken,
    HolderIdentity,
    LeaseRecord,
    Outcome,
    Rejection,
    bind,
    claim,
    complete,
    excuse,
    hold_may_outlive,
    lease_is_closed,
    reclaim,
    release,
    renew,
    reopen,
    suspend,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)
A = HolderIdentity("worker-a")
B = HolderIdentity("worker-b")
WORKERS = (A, B, HolderIdentity("worker-c"), HolderIdentity("worker-d"))


JOBS = ("job-uid-1", "job-uid-0")
"""The incarnation the lease serves, and an earlier one (a claim judged before a take-over)."""


def fresh(token: int = 0, limit: int | None = None) -> LeaseRecord:
    return LeaseRecord(
        job_name="job",
        holder_identity=None,
        fencing_token=FencingToken(token),
        lease_duration_seconds=30,
        max_fencing_token=None if limit is None else FencingToken(limit),
        job_uid=JOBS[0],
    )


def accepted(decision: Decision) -> LeaseRecord:
    assert isinstance(decision, Allowed), decision
    return decision.record


def refused(decision: Decision, before: LeaseRecord, why: Rejection) -> None:
    assert isinstance(decision, Denied), decision
    assert decision.rejection is why
    assert decision.record == before


@dataclass
class Model:
    """What the lease must be, kept independently of the protocol's records."""

    token: int
    limit: int | None = None
    holder: HolderIdentity | None = None
    completion: tuple[int, HolderIdentity, Outcome] | None = None
    claims: int = 0
    holder_uid: str | None = None

    def holder_check(
        self, worker: HolderIdentity, token: int, uid: str | None = None
    ) -> Rejection | None:
        if self.completion is not None:
            return Rejection.COMPLETED
        if uid is not None and token > self.token:
            return Rejection.NOT_BOUND  # a pod made for a claim that has not landed
        if token != self.token:
            return Rejection.STALE_TOKEN
        if self.holder != worker:
            return Rejection.NOT_HOLDER
        if uid is not None and self.holder_uid is None:
            return Rejection.NOT_BOUND
        if uid is not None and self.holder_uid != uid:
            return Rejection.NOT_HOLDER
        return None


# Which token a worker sends: its latest grant, any of its grants, anyone's grant, the
# lease's current token (read from the store), or a made-up one; index picks in the pool.
TOKEN_CHOICES = st.tuples(
    st.sampled_from(["latest", "own", "anyone", "current", "made_up"]),
    st.integers(0, 50),
    st.integers(-2, 40),
)


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.record = fresh()
        self.model = Model(token=0)
        self.start_token = 0
        self.granted: dict[HolderIdentity, list[int]] = {w: [] for w in WORKERS}
        self.tokens_seen: list[int] = [0]
        self.first_completion: Completion | None = None
        self.ticks = 0
        self.pods: list[tuple[HolderIdentity, int, str]] = []
        """Pods the operator created, claim landed or not: (name, token, uid)."""

    @initialize(start=st.integers(0, 5), limit=st.none() | st.integers(0, 12))
    def start(self, start: int, limit: int | None) -> None:
        self.record = fresh(start, limit)
        self.model = Model(token=start, limit=limit)
        self.start_token = start
        self.tokens_seen = [start]

    def now(self) -> datetime:
        self.ticks += 1
        return T0 + timedelta(seconds=self.ticks)

    def pick_token(self, worker: HolderIdentity, choice: tuple[str, int, int]) -> int:
        source, index, made_up = choice
        pools: dict[str, list[int]] = {
            "latest": self.granted[worker][-1:],
            "own": self.granted[worker],
            "anyone": [t for ts in self.granted.values() for t in ts],
            "current": [self.record.fencing_token],
        }
        pool = pools.get(source, [])
        return pool[index % len(pool)] if pool else made_up

    def apply(self, decision: Decision, before: LeaseRecord, expected: Rejection | None) -> bool:
        if before.completion is not None:  # nothing is accepted after completion
            assert isinstance(decision, Denied)
        if expected is not None:
            refused(decision, before, expected)
            return False
        self.record = accepted(decision)
        assert self.record.job_name == before.job_name
        assert self.record.lease_duration_seconds == before.lease_duration_seconds
        assert self.record.max_fencing_token == before.max_fencing_token
        return True

    @rule(worker=st.sampled_from(WORKERS))
    def do_claim(self, worker: HolderIdentity) -> None:
        before, now = self.record, self.now()
        expected = (
            Rejection.COMPLETED
            if self.model.completion is not None
            else Rejection.LOST_RACE
            if self.model.holder is not None
            else Rejection.EXHAUSTED
            if self.model.limit is not None and self.model.token >= self.model.limit
            else None
        )
        if self.apply(claim(before, worker, now), before, expected):
            assert not before.held and before.completion is None
            assert self.record.fencing_token == before.fencing_token + 1
            assert self.record.acquire_time == now and self.record.renew_time == now
            self.model.token += 1
            self.model.claims += 1
            self.model.holder = worker
            self.model.holder_uid = None
            self.granted[worker].append(self.record.fencing_token)

    @rule(worker=st.sampled_from(WORKERS), ahead=st.integers(-1, 2), job=st.sampled_from(JOBS))
    def do_push_claim(self, worker: HolderIdentity, ahead: int, job: str) -> None:
        # The operator creates the pod first, under the token it planned (the
        # lease's + 1 when it judged; ``ahead`` makes that judgement stale),
        # then claims bound to the new pod's UID, pinned to that token and job.
        planned = self.record.fencing_token + ahead
        uid = f"uid-{len(self.pods)}"
        self.pods.append((worker, planned, uid))
        before, now = self.record, self.now()
        expected = (
            Rejection.COMPLETED
            if self.model.completion is not None
            else Rejection.LOST_RACE
            if self.model.holder is not None or ahead != 1 or job != JOBS[0]
            else Rejection.EXHAUSTED
            if self.model.limit is not None and self.model.token >= self.model.limit
            else None
        )
        decision = claim(
            before, worker, now, holder_uid=uid, token=FencingToken(planned), job_uid=job
        )
        if self.apply(decision, before, expected):
            assert self.record.fencing_token == planned
            assert self.record.holder_uid == uid  # claimed and bound in one decision
            self.model.token += 1
            self.model.claims += 1
            self.model.holder = worker
            self.model.holder_uid = uid
            self.granted[worker].append(planned)

    @rule(pick=st.integers(0, 200), renewing=st.booleans())
    def do_pod_write(self, pick: int, renewing: bool) -> None:
        # Any pod the operator ever made renews (or releases) as itself: only
        # the one whose claim landed, under its token, is ever accepted; one
        # whose claim has not landed (or never will) waits (NOT_BOUND) or is
        # refused.
        if not self.pods:
            return
        worker, token, uid = self.pods[pick % len(self.pods)]
        before, now = self.record, self.now()
        expected = self.model.holder_check(worker, token, uid)
        if renewing:
            decision = renew(before, worker, FencingToken(token), now, holder_uid=uid)
        else:
            decision = release(before, worker, FencingToken(token), holder_uid=uid)
        if self.apply(decision, before, expected):
            assert uid == self.model.holder_uid
            if not renewing:
                self.model.holder = None
                self.model.holder_uid = None

    @rule(worker=st.sampled_from(WORKERS), choice=TOKEN_CHOICES)
    def do_renew(self, worker: HolderIdentity, choice: tuple[str, int, int]) -> None:
        token = self.pick_token(worker, choice)
        before, now = self.record, self.now()
        expected = self.model.holder_check(worker, token)
        if self.apply(renew(before, worker, FencingToken(token), now), before, expected):
            assert self.record.renew_time == now
            assert self.record.acquire_time == before.acquire_time

    @rule(worker=st.sampled_from(WORKERS), choice=TOKEN_CHOICES, outcome=st.sampled_from(Outcome))
    def do_complete(
        self, worker: HolderIdentity, choice: tuple[str, int, int], outcome: Outcome
    ) -> None:
        token = self.pick_token(worker, choice)
        before, now = self.record, self.now()
        expected = self.model.holder_check(worker, token)
        decision = complete(
            before,
            worker,
            FencingToken(token),
            outcome,
            now,
            message=f"by {worker}",
            exit_code=token,
        )
        if self.apply(decision, before, expected):
            done = self.record.completion
            assert done is not None
            assert (done.fencing_token, done.holder_identity) == (before.fencing_token, worker)
            assert (done.outcome, done.complete_time) == (outcome, now)
            assert (done.message, done.exit_code) == (f"by {worker}", token)
            assert self.model.holder is not None
            self.model.completion = (self.model.token, self.model.holder, outcome)
            self.model.holder = None
            self.model.holder_uid = None
            self.first_completion = done

    @rule(worker=st.sampled_from(WORKERS), choice=TOKEN_CHOICES)
    def do_release(self, worker: HolderIdentity, choice: tuple[str, int, int]) -> None:
        token = self.pick_token(worker, choice)
        before = self.record
        expected = self.model.holder_check(worker, token)
        if self.apply(release(before, worker, FencingToken(token)), before, expected):
            self.model.holder = None
            self.model.holder_uid = None

    @rule(expired=st.booleans())
    def do_reclaim(self, expired: bool) -> None:
        before = self.record
        expected = (
            Rejection.COMPLETED
            if self.model.completion is not None
            else Rejection.NOT_EXPIRED
            if self.model.holder is None or not expired
            else None
        )
        if self.apply(reclaim(before, expired=expired), before, expected):
            self.model.holder = None
            self.model.holder_uid = None

    @invariant()
    def matches_model(self) -> None:
        assert self.record.fencing_token == self.model.token
        assert self.record.holder_identity == self.model.holder
        assert self.record.holder_uid == self.model.holder_uid
        assert self.record.held == (self.model.holder is not None)

    @invariant()
    def token_moves_only_by_claims(self) -> None:
        assert self.record.fencing_token == self.start_token + self.model.claims
        step = self.record.fencing_token - self.tokens_seen[-1]
        assert step in (0, 1)
        if self.model.limit is not None:  # no claim takes the token past the limit
            assert self.record.fencing_token <= max(self.start_token, self.model.limit)
        self.tokens_seen.append(self.record.fencing_token)

    @invariant()
    def completion_recorded_once(self) -> None:
        done = self.record.completion
        if self.model.completion is None:
            assert done is None
            return
        assert done is not None and done == self.first_completion
        assert (done.fencing_token, done.holder_identity, done.outcome) == self.model.completion
        assert not self.record.held


def test_lease_state_machine() -> None:
    run_state_machine_as_test(
        LeaseMachine,
        settings=settings(
            max_examples=200,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_worked_example_stale_holder_is_fenced_off() -> None:
    lease = fresh()
    for i in range(6):  # tokens 1..6 come and go
        worker = WORKERS[i % len(WORKERS)]
        lease = accepted(claim(lease, worker, T0))
        lease = accepted(release(lease, worker, lease.fencing_token))
    lease = accepted(claim(lease, A, T0))
    assert (lease.holder_identity, lease.fencing_token) == (A, 7)
    # A pauses; the operator judges the lease expired and reclaims it.
    refused(reclaim(lease, expired=False), lease, Rejection.NOT_EXPIRED)
    lease = accepted(reclaim(lease, expired=True))
    assert (lease.holder_identity, lease.fencing_token) == (None, 7)
    lease = accepted(claim(lease, B, T0 + timedelta(seconds=60)))
    assert (lease.holder_identity, lease.fencing_token) == (B, 8)
    # A resumes: its token 7 is stale for every operation.
    stale = FencingToken(7)
    refused(complete(lease, A, stale, Outcome.SUCCEEDED, T0), lease, Rejection.STALE_TOKEN)
    refused(renew(lease, A, stale, T0), lease, Rejection.STALE_TOKEN)
    refused(release(lease, A, stale), lease, Rejection.STALE_TOKEN)
    # B completes with 8: recorded once, under B and 8.
    done_at = T0 + timedelta(seconds=90)
    lease = accepted(complete(lease, B, FencingToken(8), Outcome.SUCCEEDED, done_at, exit_code=0))
    assert lease.completion == Completion(FencingToken(8), B, Outcome.SUCCEEDED, done_at, "", 0)
    assert (lease.holder_identity, lease.fencing_token) == (None, 8)
    again = complete(lease, B, FencingToken(8), Outcome.FAILED, T0 + timedelta(seconds=99))
    refused(again, lease, Rejection.COMPLETED)
    refused(claim(lease, A, T0), lease, Rejection.COMPLETED)
    refused(reclaim(lease, expired=True), lease, Rejection.COMPLETED)


@pytest.mark.parametrize("start", [0, 4])
def test_old_release_retried_after_same_holder_claimed_again_changes_nothing(start: int) -> None:
    lease = accepted(claim(fresh(start), A, T0))
    old = lease.fencing_token
    lease = accepted(release(lease, A, old))
    lease = accepted(claim(lease, A, T0 + timedelta(seconds=5)))
    assert lease.fencing_token == old + 1
    refused(release(lease, A, old), lease, Rejection.STALE_TOKEN)
    refused(renew(lease, A, old, T0), lease, Rejection.STALE_TOKEN)
    refused(complete(lease, A, old, Outcome.FAILED, T0), lease, Rejection.STALE_TOKEN)
    assert (lease.holder_identity, lease.fencing_token) == (A, old + 1)


def test_claims_stop_at_the_attempt_limit() -> None:
    lease = fresh(limit=2)
    lease = accepted(release(accepted(claim(lease, A, T0)), A, FencingToken(1)))
    lease = accepted(claim(lease, B, T0))
    assert lease.fencing_token == 2
    lease = accepted(renew(lease, B, FencingToken(2), T0))  # the last holder keeps working
    lease = accepted(reclaim(lease, expired=True))
    refused(claim(lease, A, T0), lease, Rejection.EXHAUSTED)
    assert (lease.holder_identity, lease.fencing_token) == (None, 2)


def test_right_token_wrong_holder_is_not_holder() -> None:
    lease = accepted(claim(fresh(), A, T0))
    refused(renew(lease, B, lease.fencing_token, T0), lease, Rejection.NOT_HOLDER)
    refused(claim(lease, B, T0), lease, Rejection.LOST_RACE)
    released = accepted(release(lease, A, lease.fencing_token))
    refused(renew(released, A, released.fencing_token, T0), released, Rejection.NOT_HOLDER)
    refused(reclaim(released, expired=True), released, Rejection.NOT_EXPIRED)


def test_a_lease_bound_to_another_pod_uid_is_not_the_callers() -> None:
    held = accepted(claim(fresh(), A, T0))
    bound = dataclasses.replace(held, holder_uid="uid-1")
    # The same pod name, replaced (another UID): not the holder, for every write.
    refused(renew(bound, A, FencingToken(1), T0, holder_uid="uid-2"), bound, Rejection.NOT_HOLDER)
    refused(
        complete(bound, A, FencingToken(1), Outcome.SUCCEEDED, T0, holder_uid="uid-2"),
        bound,
        Rejection.NOT_HOLDER,
    )
    refused(release(bound, A, FencingToken(1), holder_uid="uid-2"), bound, Rejection.NOT_HOLDER)
    # The bound pod itself, and a caller that is no pod, are judged as before.
    accepted(renew(bound, A, FencingToken(1), T0, holder_uid="uid-1"))
    accepted(renew(bound, A, FencingToken(1), T0))
    # Every end of a hold unbinds it; a claim starts unbound.
    assert accepted(release(bound, A, FencingToken(1))).holder_uid is None
    assert accepted(reclaim(bound, expired=True)).holder_uid is None
    assert accepted(complete(bound, A, FencingToken(1), Outcome.FAILED, T0)).holder_uid is None
    assert accepted(claim(accepted(reclaim(bound, expired=True)), B, T0)).holder_uid is None


def test_reopen_moves_a_failed_completion_and_keeps_the_token() -> None:
    held = accepted(claim(fresh(), HolderIdentity("w-1"), T0))
    done = accepted(complete(held, HolderIdentity("w-1"), FencingToken(1), Outcome.FAILED, T0))
    reopened = accepted(reopen(done))
    assert (reopened.completion, reopened.failures, reopened.fencing_token) == (None, 1, 1)
    assert reopened.last_failure == done.completion
    # The failed worker is fenced off; the next claim bumps the token.
    refused(
        renew(reopened, HolderIdentity("w-1"), FencingToken(1), T0), reopened, Rejection.NOT_HOLDER
    )
    assert accepted(claim(reopened, HolderIdentity("w-2"), T0)).fencing_token == 2


def test_reopen_refuses_a_success_and_an_open_lease() -> None:
    held = accepted(claim(fresh(), HolderIdentity("w-1"), T0))
    refused(reopen(held), held, Rejection.NOT_EXPIRED)
    done = accepted(complete(held, HolderIdentity("w-1"), FencingToken(1), Outcome.SUCCEEDED, T0))
    refused(reopen(done), done, Rejection.COMPLETED)


@given(start=st.integers(0, 50), extra=st.integers(1, 5))
def test_excuse_raises_the_cap_once_per_token_and_only_unheld(start: int, extra: int) -> None:
    lease = fresh(start, limit=start + extra)
    held = accepted(claim(lease, A, T0))
    refused(excuse(held), held, Rejection.NOT_EXPIRED)
    ended = accepted(release(held, A, held.fencing_token))
    excused = accepted(excuse(ended))
    assert excused.max_fencing_token == start + extra + 1
    assert (excused.uncounted_attempts, excused.last_uncounted_token) == (1, start + 1)
    assert (excused.fencing_token, excused.holder_identity) == (start + 1, None)
    refused(excuse(excused), excused, Rejection.NOT_EXPIRED)  # once per token
    suspended = accepted(suspend(held))  # a suspension uncounts the attempt it ends, once
    assert (suspended.max_fencing_token, suspended.last_uncounted_token) == (
        start + extra + 1,
        start + 1,
    )
    refused(excuse(suspended), suspended, Rejection.NOT_EXPIRED)
    uncapped = fresh(start)
    refused(excuse(uncapped), uncapped, Rejection.NOT_EXPIRED)
    done = accepted(complete(held, A, held.fencing_token, Outcome.FAILED, T0))
    refused(excuse(done), done, Rejection.COMPLETED)
    # A failure a rule ignores: moved to lastFailure, not counted, excused in one step.
    ignored = accepted(reopen(done, counted=False))
    assert (ignored.completion, ignored.failures, ignored.uncounted_attempts) == (None, 0, 1)
    assert ignored.last_failure == done.completion


@given(start=st.integers(0, 50), room=st.integers(0, 3))
def test_no_excuse_or_suspension_raises_the_cap_past_the_ceiling(start: int, room: int) -> None:
    # A schedule's run: its cap may rise by `room` (its reserved range), never past it.
    lease = dataclasses.replace(
        fresh(start, limit=start + 1), ceiling_fencing_token=FencingToken(start + 1 + room)
    )
    for _ in range(room):
        held = accepted(claim(lease, A, T0))
        lease = accepted(excuse(accepted(release(held, A, held.fencing_token))))
    held = accepted(claim(lease, A, T0))
    ended = accepted(release(held, A, held.fencing_token))
    assert ended.max_fencing_token == ended.ceiling_fencing_token == ended.fencing_token
    refused(excuse(ended), ended, Rejection.EXHAUSTED)  # the attempt counts
    suspended = accepted(suspend(held))
    assert suspended.max_fencing_token == held.max_fencing_token  # no raise past the ceiling
    refused(claim(ended, B, T0), ended, Rejection.EXHAUSTED)
    assert lease_is_closed(ended) and not lease_is_closed(lease)


def test_a_pod_never_binds_a_lease_by_its_own_writes() -> None:
    # Push mode: the operator claimed for pod name A and has yet to bind the
    # pod it created. A pod of that name (perhaps one the operator did not
    # create) is refused, as not yet bound, for every write.
    held = accepted(claim(fresh(), A, T0))
    refused(renew(held, A, FencingToken(1), T0, holder_uid="uid-2"), held, Rejection.NOT_BOUND)
    refused(
        complete(held, A, FencingToken(1), Outcome.SUCCEEDED, T0, holder_uid="uid-2"),
        held,
        Rejection.NOT_BOUND,
    )
    refused(release(held, A, FencingToken(1), holder_uid="uid-2"), held, Rejection.NOT_BOUND)
    # Only the operator's bind binds, to its holder under its token, once.
    bound = accepted(bind(held, A, FencingToken(1), "uid-1"))
    assert bound.holder_uid == "uid-1"
    assert accepted(bind(bound, A, FencingToken(1), "uid-1")) == bound
    refused(bind(bound, A, FencingToken(1), "uid-2"), bound, Rejection.NOT_HOLDER)
    refused(bind(held, B, FencingToken(1), "uid-1"), held, Rejection.NOT_HOLDER)
    refused(bind(held, A, FencingToken(2), "uid-1"), held, Rejection.STALE_TOKEN)
    accepted(renew(bound, A, FencingToken(1), T0, holder_uid="uid-1"))


def test_a_claim_binds_the_pod_made_for_its_token_and_a_lost_claims_pod_never_holds() -> None:
    # Push mode: the pod is created first, under token 1, and waits while the
    # claim has not landed: NOT_BOUND (retry), not STALE_TOKEN (a loss).
    lease = fresh(limit=5)
    refused(renew(lease, A, FencingToken(1), T0, holder_uid="uid-1"), lease, Rejection.NOT_BOUND)
    held = accepted(claim(lease, A, T0, holder_uid="uid-1", token=FencingToken(1), job_uid=JOBS[0]))
    assert (held.fencing_token, held.holder_uid) == (1, "uid-1")
    accepted(renew(held, A, FencingToken(1), T0, holder_uid="uid-1"))
    # Another replica's claim for the same token (its pod, or this one) loses ...
    again = claim(held, A, T0, holder_uid="uid-1", token=FencingToken(1), job_uid=JOBS[0])
    refused(again, held, Rejection.LOST_RACE)
    # ... and so does one judged on a stale lease or for an earlier incarnation.
    refused(claim(lease, A, T0, token=FencingToken(2)), lease, Rejection.LOST_RACE)
    refused(claim(lease, A, T0, token=FencingToken(1), job_uid=JOBS[1]), lease, Rejection.LOST_RACE)
    # A pod of the same name and token whose claim lost (a lost claim's pod,
    # or one made under that name by anyone else) is not the holder.
    refused(renew(held, A, FencingToken(1), T0, holder_uid="uid-2"), held, Rejection.NOT_HOLDER)
    refused(release(held, A, FencingToken(1), holder_uid="uid-2"), held, Rejection.NOT_HOLDER)
    # A pod made for token 2 while token 1 holds: not yet (its claim may land later).
    refused(renew(held, A, FencingToken(2), T0, holder_uid="uid-3"), held, Rejection.NOT_BOUND)


def test_a_hold_ended_without_expiry_may_outlive_its_end_until_waited_out() -> None:
    """Take-over and resume wait for a worker that was stopped, not judged expired.

    The Spin model's counterexample (invariant 5): a job deleted and created
    again took its lease over and claimed the next token while the stopped
    worker could still write under the old one within its local deadline.
    """
    never = fresh()
    assert not hold_may_outlive(never, reclaimed=False)  # no claim yet: nobody to wait for
    held = accepted(claim(fresh(), A, T0))
    assert hold_may_outlive(held, reclaimed=False)  # still held: its worker runs
    stopped = dataclasses.replace(held, holder_identity=None, max_fencing_token=held.fencing_token)
    assert hold_may_outlive(stopped, reclaimed=False)  # stopped: its worker does not know yet
    assert not hold_may_outlive(stopped, reclaimed=True)  # judged expired: its window passed
    done = accepted(complete(held, A, held.fencing_token, Outcome.SUCCEEDED, T0))
    assert not hold_may_outlive(done, reclaimed=False)  # its worker ended it
    suspended_held = accepted(suspend(held))
    assert hold_may_outlive(suspended_held, reclaimed=False)  # the suspension ended a hold
    # Stopped, then suspended: the stopped worker may still run; no mark says so.
    suspended_unheld = accepted(suspend(stopped))
    assert suspended_unheld.last_uncounted_token != suspended_unheld.fencing_token
    assert hold_may_outlive(suspended_unheld, reclaimed=False)
    assert not hold_may_outlive(suspended_unheld, reclaimed=True)
