"""The worker SDK's timing and loss detection, against a fake store (no cluster).

The fake store has the LeaseStore method signatures (plus the optional
``request_timeout`` keyword); what is tested here is the holder's clock
arithmetic and threads, not the store.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from leasehold import worker
from leasehold.lease.errors import TransientStoreError
from leasehold.lease.protocol import (
    Completion,
    FencingToken,
    HolderIdentity,
    LeaseRecord,
    Outcome,
    Rejection,
)
from leasehold.lease.store import Accepted, Rejected, Result, StoredLease
from leasehold.worker import (
    LeaseEnvironmentError,
    LeaseHolder,
    LeaseLost,
    LeaseTiming,
    LossReason,
)
from leasehold.worker import holder as holder_module
from leasehold.worker import renewer as renewer_module
from leasehold.worker import timing as timing_module
from leasehold.worker.run import add_run_parser, term_lead_seconds

EPSILON = 0.3
"""How late (seconds) a thread may notice a deadline on a loaded test machine (the
unit tests share CI's workers with the integration tier: a renewer's loop woke
0.115 s late in a rehearsal at 0.1). Every bound it widens stays below the next
event it must be told from (the next renewal, the deadline: 0.5 s apart at least)."""


def stored(
    holder: str | None = "w", token: int = 1, completion: Completion | None = None
) -> StoredLease:
    record = LeaseRecord(
        job_name="job",
        holder_identity=HolderIdentity(holder) if holder else None,
        fencing_token=FencingToken(token),
        lease_duration_seconds=30,
        completion=completion,
    )
    return StoredLease("ns", "job", record, "1", 1, {})


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


Behaviour = Callable[[], Result]


class FakeStore:
    """LeaseStore's signatures; each renew runs ``on_renew`` (default: accept)."""

    def __init__(self, on_renew: Behaviour | None = None) -> None:
        self.on_renew: Behaviour = on_renew or (lambda: Accepted(stored()))
        self.renews: list[tuple[float, float | None]] = []  # (monotonic at call, timeout)
        self.completes: list[tuple[Outcome, str, int | None]] = []
        self.on_complete: Behaviour = lambda: Accepted(stored(None))
        self.releases = 0
        self.on_release: Behaviour = lambda: Accepted(stored(None))
        self.clock: Callable[[], float] = time.monotonic
        self.listed: list[StoredLease] = []
        self.claims: list[tuple[str, StoredLease | None]] = []  # (name, observed)

    def claim(
        self,
        namespace: str,
        name: str,
        claimant: str,
        *,
        observed: StoredLease | None = None,
    ) -> Result:
        self.claims.append((name, observed))
        return Accepted(stored(claimant))

    def renew(
        self,
        namespace: str,
        name: str,
        holder: str,
        token: int,
        *,
        request_timeout: float | None = None,
    ) -> Result:
        self.renews.append((self.clock(), request_timeout))
        return self.on_renew()

    def complete(
        self,
        namespace: str,
        name: str,
        holder: str,
        token: int,
        outcome: Outcome,
        *,
        message: str = "",
        exit_code: int | None = None,
        request_timeout: float | None = None,
    ) -> Result:
        self.completes.append((outcome, message, exit_code))
        return self.on_complete()

    def list_leases(
        self, namespace: str, *, label_selector: str | None = None
    ) -> list[StoredLease]:
        return list(self.listed)

    def release(
        self,
        namespace: str,
        name: str,
        holder: str,
        token: int,
        *,
        request_timeout: float | None = None,
    ) -> Result:
        self.releases += 1
        return self.on_release()


class Noticed:
    """An ``on_lost`` callback that records when it was called and why."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, LeaseLost]] = []
        self.called = threading.Event()

    def __call__(self, loss: LeaseLost) -> None:
        self.calls.append((time.monotonic(), loss))
        self.called.set()


@pytest.fixture
def hang() -> Iterator[threading.Event]:
    """An event hung renewals wait on; set at teardown so their threads end."""
    event = threading.Event()
    yield event
    event.set()


def make_holder(
    store: FakeStore,
    duration: float,
    *,
    margin: float | None = None,
    acquired_at: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_lost: worker.LossCallback | None = None,
) -> LeaseHolder:
    store.clock = clock
    return LeaseHolder(
        store,
        "ns",
        "job",
        "w",
        1,
        duration,
        margin_seconds=margin,
        acquired_at=acquired_at,
        monotonic=clock,
        on_lost=on_lost,
    )


# -- timing arithmetic ------------------------------------------------------


def test_default_timing_for_a_30_second_lease() -> None:
    timing = LeaseTiming.for_duration(30)
    assert timing.renew_interval_seconds == pytest.approx(10)
    assert timing.margin_seconds == pytest.approx(6)  # 20 %
    assert timing.window_seconds == pytest.approx(24)
    assert timing.deadline_after(1000.0) == pytest.approx(1024.0)


def test_short_leases_keep_a_usable_window() -> None:
    two = LeaseTiming.for_duration(2)
    assert two.margin_seconds == pytest.approx(1.0)  # the 1 s floor
    assert two.renew_interval_seconds < two.window_seconds
    one = LeaseTiming.for_duration(1)
    assert one.margin_seconds == pytest.approx(0.5)  # capped at half the duration
    assert one.renew_interval_seconds < one.window_seconds


@pytest.mark.parametrize(
    ("duration", "fraction", "margin"),
    [(10, 0.9, None), (10, 1 / 3, 10), (0, 1 / 3, None), (10, 0, None), (10, 0.5, 5)],
)
def test_timing_that_leaves_no_time_to_renew_is_refused(
    duration: float, fraction: float, margin: float | None
) -> None:
    with pytest.raises(ValueError, match=r"must|no time"):
        LeaseTiming.for_duration(duration, renew_fraction=fraction, margin_seconds=margin)


def test_deadline_runs_from_the_start_of_the_request_not_its_end() -> None:
    clock = FakeClock(100.0)
    store = FakeStore()

    def slow_accept() -> Result:
        clock.now += 0.7  # the request takes 0.7 s
        return Accepted(stored())

    store.on_renew = slow_accept
    holder = make_holder(store, 10, clock=clock)  # window 8 s
    assert holder.deadline is None
    holder.renew_now()
    assert clock.now == pytest.approx(100.7)
    assert holder.deadline == pytest.approx(100.0 + 8.0)
    assert holder.remaining_seconds() == pytest.approx(8.0 - 0.7)


def test_request_timeout_is_well_inside_the_window_and_never_past_the_deadline() -> None:
    clock = FakeClock(100.0)
    store = FakeStore()
    holder = make_holder(store, 30, clock=clock, acquired_at=100.0)  # deadline 124
    assert holder.timing.request_timeout_seconds == pytest.approx(5.0)  # half of 10 s
    clock.now = 110.0
    holder.renew_now()  # deadline 134
    clock.now = 131.5
    holder.renew_now()
    (at1, timeout1), (_, timeout2) = store.renews
    assert at1 == 110.0
    assert timeout1 == pytest.approx(5.0)  # 14 s were left: bounded by the request timeout
    assert timeout2 == pytest.approx(134.0 - 131.5)  # bounded by the deadline
    # Short leases: at least 1 s per request, unless the deadline is nearer.
    assert LeaseTiming.for_duration(3).request_timeout_seconds == pytest.approx(1.0)


def test_check_fails_exactly_at_the_deadline() -> None:
    clock = FakeClock(0.0)
    holder = make_holder(FakeStore(), 10, clock=clock, acquired_at=0.0)  # window 8 s
    clock.now = 7.999
    holder.check()
    assert holder.remaining_seconds() == pytest.approx(0.001)
    clock.now = 8.0
    with pytest.raises(LeaseLost) as lost:
        holder.check()
    assert lost.value.reason is LossReason.DEADLINE_PASSED
    assert holder.remaining_seconds() == 0.0


def test_an_unconfirmed_holder_is_not_held() -> None:
    holder = make_holder(FakeStore(), 10)  # push mode, not started
    with pytest.raises(LeaseLost):
        holder.check()
    assert holder.remaining_seconds() == 0.0


# -- loss detection (real threads, real clock) ------------------------------


def test_a_renew_that_hangs_loses_the_lease_at_the_deadline(hang: threading.Event) -> None:
    store = FakeStore()
    store.on_renew = lambda: (hang.wait(), Accepted(stored()))[1]
    noticed = Noticed()
    start = time.monotonic()
    holder = make_holder(
        store,
        1.5,
        margin=0.3,  # window 1.2 s, renew every 0.5 s
        acquired_at=start,
        on_lost=noticed,
    )
    holder.start()
    deadline = start + 1.2
    assert holder.deadline == pytest.approx(deadline)
    assert noticed.called.wait(3.0)
    assert holder.lost.is_set()
    [(at, loss)] = noticed.calls
    assert deadline <= at <= deadline + EPSILON, at - deadline
    assert loss.reason is LossReason.DEADLINE_PASSED
    with pytest.raises(LeaseLost) as raised:
        holder.check()
    assert raised.value.reason is LossReason.DEADLINE_PASSED
    # The hung request was sent once, with a timeout ending at the deadline.
    [(sent_at, timeout)] = store.renews
    assert sent_at == pytest.approx(start + 0.5, abs=EPSILON)
    # (The fake store reads the clock a few microseconds after the holder
    # computed the timeout, hence the 5 ms allowance.)
    assert timeout is not None and sent_at + timeout <= deadline + 0.005


def test_a_hung_renew_gets_a_new_try_beside_it_after_its_timeout(
    hang: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timing_module, "MIN_REQUEST_TIMEOUT_SECONDS", 0.1)
    answers = iter(["hang"])
    store = FakeStore()
    store.on_renew = lambda: (
        (hang.wait(), Accepted(stored()))[1]
        if next(answers, "ok") == "hang"
        else Accepted(stored())
    )
    start = time.monotonic()
    # window 2.4 s, renew every 1 s, a new try after 0.5 s, each waited for 1 s. (At
    # half these a CI run's loop woke 0.115 s late: the scale leaves 0.3 s of slack
    # and still tells a try beside it, 0.5 s in, from a try after the first was
    # given up, 1 s in.)
    holder = make_holder(store, 3.0, margin=0.6, acquired_at=start).start()
    assert holder.timing.request_timeout_seconds == pytest.approx(0.5)
    try:
        time.sleep(2.8)  # past the first deadline (start + 2.4)
        holder.check()  # the try beside the hung request renewed the lease
        (first, timeout1), (second, timeout2) = store.renews[:2]
        lifetime = renewer_module.REQUEST_LIFETIME_TIMEOUTS * 0.5
        assert timeout1 is not None and timeout1 <= lifetime
        assert timeout2 is not None and timeout2 <= lifetime
        # Tried again once the first went a request timeout unanswered: not once it
        # was given up (1 s) nor at the deadline. (The first request's own stamp may
        # come late on a busy machine: the timeout runs from the attempt's start, so
        # the gap can be shorter than 0.5 s; the loop may wake late, so longer.)
        assert second - first <= 0.5 + 0.3
    finally:
        holder.release()


def test_renewals_answered_after_the_request_timeout_still_keep_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An overloaded API server answers every renewal late, but within twice the timeout.

    Giving each request up at its timeout threw every answer away and lost the
    lease at the deadline with the server healthy (200 jobs on kind,
    2026-12-05); each answer counts from its own request's start.
    """
    monkeypatch.setattr(timing_module, "MIN_REQUEST_TIMEOUT_SECONDS", 0.1)
    store = FakeStore()

    def slow() -> Result:
        time.sleep(0.4)  # 1.6 request timeouts
        return Accepted(stored())

    store.on_renew = slow
    noticed = Noticed()
    start = time.monotonic()
    # window 1.2 s, renew every 0.5 s, a request timeout of 0.25 s
    holder = make_holder(store, 1.5, margin=0.3, acquired_at=start, on_lost=noticed).start()
    try:
        time.sleep(3.0)  # two and a half windows
        assert not noticed.calls, noticed.calls
        holder.check()
        # At most two requests waited for at once: one every 0.25 s at the most.
        sent = [at for at, _ in store.renews]
        assert len(sent) <= 3.0 / 0.25 + 1, sent
    finally:
        holder.release()


def test_a_rejected_renew_loses_the_lease_at_once_with_its_reason() -> None:
    answered: list[float] = []

    def reject() -> Result:
        answered.append(time.monotonic())
        return Rejected(Rejection.STALE_TOKEN, stored("b", 2))

    store = FakeStore(reject)
    noticed = Noticed()
    start = time.monotonic()
    holder = make_holder(
        store,
        3,
        margin=0.5,  # renew every 1 s, window 2.5 s
        acquired_at=start,
        on_lost=noticed,
    )
    holder.start()
    assert noticed.called.wait(3.0)
    assert holder.lost.is_set()
    [(at, loss)] = noticed.calls
    assert at - answered[0] < 0.05
    assert at < start + 2.5 - 1.0  # long before the deadline
    assert loss.reason is Rejection.STALE_TOKEN
    assert "token 2" in loss.detail
    with pytest.raises(LeaseLost) as raised:
        holder.check()
    assert raised.value.reason is Rejection.STALE_TOKEN
    assert holder.remaining_seconds() == 0.0
    time.sleep(1.2)
    assert len(store.renews) == 1  # no renewing after the loss
    assert len(noticed.calls) == 1


def test_transient_failures_are_retried_until_the_deadline() -> None:
    def fail() -> Result:
        raise TransientStoreError("api server unavailable", 503)

    store = FakeStore(fail)
    noticed = Noticed()
    start = time.monotonic()
    # deadline start + 1.2
    holder = make_holder(store, 1.5, margin=0.3, acquired_at=start, on_lost=noticed)
    holder.start()
    assert noticed.called.wait(3.0)
    # When the holder's own thread declared the loss (not when this thread woke
    # up to look: at a load average of 16 that alone took longer than EPSILON).
    [(lost_at, _)] = noticed.calls
    assert lost_at <= start + 1.2 + EPSILON
    loss = holder.loss
    assert loss is not None and loss.reason is LossReason.DEADLINE_PASSED
    assert len(store.renews) >= 3  # retried every 0.125 s after the first failure


def test_renewing_keeps_the_lease_and_complete_stops_it() -> None:
    store = FakeStore()
    holder = make_holder(store, 0.9, margin=0.3, acquired_at=time.monotonic())  # renew 0.3 s
    holder.start()
    for _ in range(20):
        time.sleep(0.1)
        holder.check()
        assert holder.remaining_seconds() > 0.2
    assert not holder.lost.is_set()
    assert len(store.renews) >= 5
    result = holder.complete(Outcome.SUCCEEDED, message="done", exit_code=0)
    assert isinstance(result, Accepted)
    renews = len(store.renews)
    time.sleep(0.5)
    assert len(store.renews) == renews  # stopped renewing
    assert holder.complete(Outcome.FAILED) is result  # idempotent: no second write
    assert holder.release() is result
    assert store.completes == [(Outcome.SUCCEEDED, "done", 0)]
    assert store.releases == 0
    with pytest.raises(LeaseLost) as raised:
        holder.check()
    assert raised.value.reason is LossReason.ENDED
    assert not holder.lost.is_set()


def test_a_refused_completion_marks_the_lease_lost() -> None:
    store = FakeStore()
    store.on_complete = lambda: Rejected(Rejection.STALE_TOKEN, stored("b", 2))
    holder = make_holder(store, 30, acquired_at=time.monotonic()).start()
    result = holder.complete(Outcome.SUCCEEDED)
    assert isinstance(result, Rejected) and result.rejection is Rejection.STALE_TOKEN
    assert holder.lost.is_set()
    loss = holder.loss
    assert loss is not None and loss.reason is Rejection.STALE_TOKEN


def test_a_completion_whose_reply_was_lost_is_accepted_on_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(holder_module, "FINAL_WRITE_DELAYS", (0.01,))
    store = FakeStore()
    calls = iter(["lost reply", "completed"])
    mine = Completion(FencingToken(1), HolderIdentity("w"), Outcome.SUCCEEDED, datetime.now(UTC))

    def complete() -> Result:
        if next(calls) == "lost reply":
            raise TransientStoreError("timed out")
        return Rejected(Rejection.COMPLETED, stored(None, 1, mine))

    store.on_complete = complete
    holder = make_holder(store, 30, acquired_at=time.monotonic()).start()
    result = holder.complete(Outcome.SUCCEEDED)
    assert isinstance(result, Accepted)
    assert len(store.completes) == 2
    assert not holder.lost.is_set()


def test_push_mode_start_renews_first_and_fails_if_refused() -> None:
    store = FakeStore(lambda: Rejected(Rejection.NOT_HOLDER, stored(None, 1)))
    holder = make_holder(store, 30)
    with pytest.raises(LeaseLost) as raised:
        holder.start()
    assert raised.value.reason is Rejection.NOT_HOLDER
    assert len(store.renews) == 1


def test_push_mode_start_retries_a_lease_not_yet_bound_to_its_pod() -> None:
    # The operator binds the lease to the pod it created just after creating
    # it: a renewal before that is refused as NotBound, which is no loss.
    answers = iter([Rejected(Rejection.NOT_BOUND, stored("a", 1))])
    store = FakeStore(lambda: next(answers, Accepted(stored("a", 1))))
    holder = make_holder(store, 3, margin=0.5).start()
    try:
        assert not holder.lost.is_set()
        assert len(store.renews) == 2
        assert holder.deadline is not None
    finally:
        holder.release()


def test_push_mode_start_gets_its_deadline_from_the_first_renewal() -> None:
    store = FakeStore()
    before = time.monotonic()
    holder = make_holder(store, 30).start()
    try:
        deadline = holder.deadline
        assert deadline is not None
        assert before + 24 <= deadline <= time.monotonic() + 24
    finally:
        holder.release()


def test_run_completes_with_the_outcome_of_the_function() -> None:
    store = FakeStore()
    holder = make_holder(store, 30, acquired_at=time.monotonic())
    assert holder.run(lambda h: h.token * 10) == 10
    assert store.completes == [(Outcome.SUCCEEDED, "", None)]

    failing_store = FakeStore()
    failing = make_holder(failing_store, 30, acquired_at=time.monotonic())

    def boom(h: LeaseHolder) -> None:
        h.check()
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing.run(boom)
    assert failing_store.completes == [(Outcome.FAILED, "RuntimeError: boom", None)]


def test_leaving_the_block_without_completing_releases() -> None:
    store = FakeStore()
    with make_holder(store, 30, acquired_at=time.monotonic()) as holder:
        holder.check()
    assert store.releases == 1


def test_the_async_guard_cancels_the_block_when_the_lease_is_lost() -> None:
    answers = iter([Accepted(stored())])

    def renew() -> Result:
        return next(answers, Rejected(Rejection.NOT_HOLDER, stored(None)))

    store = FakeStore(renew)
    holder = make_holder(store, 0.9, margin=0.3, acquired_at=time.monotonic())  # renew 0.3 s

    async def work() -> tuple[float, int]:
        began = time.monotonic()
        with pytest.raises(LeaseLost) as raised:
            async with holder.guard():
                await asyncio.sleep(10)
        assert raised.value.reason is Rejection.NOT_HOLDER
        task = asyncio.current_task()
        assert task is not None
        return time.monotonic() - began, task.cancelling()

    with holder:
        took, cancelling = asyncio.run(work())
    # The second renewal, at 0.6 s, is refused and the 10 s block is cancelled
    # then; the bound leaves room for a loaded machine's scheduling (at a load
    # average of 16 the 0.7 s bound failed), not for a block left to run.
    assert took < 0.6 + 1.0
    assert len(store.renews) == 2
    assert cancelling == 0  # the task itself is not left cancelled
    assert store.releases == 0  # lost: nothing to give back


def test_the_async_guard_refuses_to_enter_once_lost() -> None:
    store = FakeStore(lambda: Rejected(Rejection.STALE_TOKEN, stored("b", 2)))
    holder = make_holder(store, 0.9, margin=0.3, acquired_at=time.monotonic()).start()
    assert holder.lost.wait(2.0)

    async def work() -> None:
        async with holder.guard():
            pytest.fail("entered the guard of a lost lease")

    with pytest.raises(LeaseLost):
        asyncio.run(work())


# -- environment and CLI ----------------------------------------------------


def test_start_times_the_window_by_the_lease_not_the_environment() -> None:
    # The pod was told 60 s; the lease says 30 s: the operator reclaims after
    # 30 s, so the worker must stop working before that.
    env = {
        "LEASEHOLD_NAMESPACE": "ns",
        "LEASEHOLD_LEASE": "job",
        "LEASEHOLD_HOLDER": "w",
        "LEASEHOLD_FENCING_TOKEN": "1",
        "LEASEHOLD_LEASE_DURATION_SECONDS": "60",
    }
    holder = LeaseHolder.from_env(store=FakeStore(), environ=env)
    assert holder.timing.duration_seconds == 60
    with holder:
        assert holder.timing.duration_seconds == 30
        assert holder.timing.window_seconds < 30


def test_from_env_reads_what_the_operator_injects() -> None:
    env = {
        "LEASEHOLD_NAMESPACE": "ns",
        "LEASEHOLD_JOB": "job",
        "LEASEHOLD_LEASE": "job-lease",
        "LEASEHOLD_HOLDER": "job-attempt-1",
        "LEASEHOLD_FENCING_TOKEN": "7",
        "LEASEHOLD_LEASE_DURATION_SECONDS": "30",
    }
    holder = LeaseHolder.from_env(store=FakeStore(), environ=env)
    assert (holder.namespace, holder.lease_name, holder.holder_identity, holder.job_name) == (
        "ns",
        "job-lease",
        "job-attempt-1",
        "job",
    )
    assert holder.token == 7
    assert holder.timing.duration_seconds == 30
    for missing in ("LEASEHOLD_HOLDER", "LEASEHOLD_FENCING_TOKEN"):
        with pytest.raises(LeaseEnvironmentError, match=missing):
            LeaseHolder.from_env(
                store=FakeStore(), environ={k: v for k, v in env.items() if k != missing}
            )
    with pytest.raises(LeaseEnvironmentError, match="malformed"):
        LeaseHolder.from_env(store=FakeStore(), environ={**env, "LEASEHOLD_FENCING_TOKEN": "x"})
    # Every missing variable is named at once, not one per attempt.
    with pytest.raises(LeaseEnvironmentError) as raised:
        LeaseHolder.from_env(store=FakeStore(), environ={"LEASEHOLD_LEASE": "job-lease"})
    assert str(raised.value).startswith(
        "not set: LEASEHOLD_NAMESPACE, LEASEHOLD_HOLDER, LEASEHOLD_FENCING_TOKEN,"
        " LEASEHOLD_LEASE_DURATION_SECONDS"
    )


def test_term_lead_is_the_grace_but_never_more_than_half_the_slack() -> None:
    assert term_lead_seconds(LeaseTiming.for_duration(30), 5) == pytest.approx(5)
    # 10 s lease: window 8 s, renew every 3.33 s -> slack 4.67 s -> lead 2.33 s
    assert term_lead_seconds(LeaseTiming.for_duration(10), 5) == pytest.approx(7 / 3)
    assert term_lead_seconds(LeaseTiming.for_duration(30), 0) == 0


def test_add_run_parser_registers_run_with_its_func() -> None:
    parser = argparse.ArgumentParser(prog="leasehold")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    args = parser.parse_args(["run", "--grace-seconds", "1.5", "--", "sh", "-c", "exit 3"])
    assert args.command == "run"
    assert args.grace_seconds == 1.5
    assert args.run_argv == ["--", "sh", "-c", "exit 3"]
    assert callable(args.func)


# -- fencing helpers ----------------------------------------------------------


def test_holder_carries_its_token_to_each_kind_of_target() -> None:
    holder = make_holder(FakeStore(), 10)
    assert holder.effect_key("pay") == "ns/job/1/pay"
    headers = holder.fencing_headers("account/42", step="pay")
    assert headers["Leasehold-Fencing-Token"] == "1"
    assert headers["Leasehold-Resource"] == "account/42"
    assert headers["Idempotency-Key"] == "ns/job/1/pay"
    params = holder.sql_params("account/42", step="pay")
    assert params["leasehold_token"] == 1
    assert params["leasehold_resource"] == "account/42"
    assert params["leasehold_idempotency_key"] == "ns/job/1/pay"
    body = holder.annotate({"metadata": {"name": "cm"}})
    assert body["metadata"]["annotations"]["leasehold.dev/fencing-token"] == "1"


# -- pull mode ----------------------------------------------------------------


def test_claim_any_judges_each_claim_on_the_listed_lease() -> None:
    store = FakeStore()
    free = StoredLease("ns", "free", stored(None, token=4).record, "7", 3, {})
    capped = dataclasses.replace(stored(None, token=3).record, max_fencing_token=FencingToken(3))
    exhausted = StoredLease("ns", "stopped", capped, "5", 2, {})
    store.listed = [stored("someone", token=2), exhausted, free]
    holder = worker.claim_any("ns", "pool-1", store=store)
    assert holder is not None
    try:
        # The held and the exhausted lease are skipped; the free one is claimed
        # with the listed record as `observed`, so the store need not read it.
        assert store.claims == [("free", free)]
    finally:
        holder.close()


def test_claim_without_observed_lets_the_store_read_the_lease() -> None:
    store = FakeStore()
    holder = worker.claim("ns", "job", "pool-1", store=store)
    assert holder is not None
    try:
        assert store.claims == [("job", None)]
    finally:
        holder.close()


def test_a_confirm_renewal_is_waited_for_half_the_window_not_a_renewals_timeout() -> None:
    """Its deadline counts from its start: an overloaded API server's late answer still counts.

    A renewal is given up after the request timeout (1.67 s for a 10 s lease)
    and tried again on a new connection; a confirm gets half the window (4 s).
    """
    from leasehold.worker.renewer import Renewer

    timeouts: list[float] = []

    def renew(timeout: float) -> Result:
        timeouts.append(timeout)
        return Accepted(stored("pod-a", token=1))

    timing = LeaseTiming.for_duration(10)
    renewer = Renewer(renew, timing, key="ns/job", acquired_at=None, on_loss=lambda loss: None)
    renewer.confirm()
    assert timing.request_timeout_seconds == pytest.approx(10 / 3 / 2)
    assert len(timeouts) == 1 and timeouts[0] == pytest.approx(4.0, abs=0.5)  # not 1.67
    assert renewer.confirm_tries == 1
