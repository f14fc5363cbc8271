"""The operator's expiry timers: who is reclaimed, when, and how many at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from leasehold.controller.engines.expiry import ExpiryClock, ExpiryReason, ExpiryWatch
from leasehold.controller.engines.peering import ActivityGate
from leasehold.controller.engines.watching import EventType, WatchEvent
from leasehold.lease.protocol import START_GRACE_MAX_SECONDS, start_grace_seconds

DURATION = 1  # seconds (the CRD's smallest lease)
MARGIN = 0.1


def lease(name: str, generation: int = 1, holder: str | None = "w") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"uid-{name}",
            "generation": generation,
        },
        "spec": {
            "jobName": name,
            "holderIdentity": holder,
            "fencingToken": 1,
            "leaseDurationSeconds": DURATION,
        },
    }


class Reclaims:
    """Records on_expired calls; optionally slow, optionally failing the first time."""

    def __init__(self, seconds: float = 0.0, fail_first: bool = False) -> None:
        self.calls: list[tuple[str, int, float]] = []
        self.bodies: list[dict[str, Any]] = []
        self.running = 0
        self.most_at_once = 0
        self._seconds = seconds
        self._fail_first = fail_first

    async def __call__(
        self,
        namespace: str,
        name: str,
        job: str,
        generation: int,
        body: dict[str, Any],
        reason: ExpiryReason,
    ) -> None:
        assert body["metadata"]["name"] == name
        self.bodies.append(body)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await asyncio.sleep(self._seconds)
            if self._fail_first and not self.calls:
                self.calls.append((name, -1, time.monotonic()))
                raise RuntimeError("the API server said no")
            self.calls.append((name, generation, time.monotonic()))
        finally:
            self.running -= 1


def new_watch(reclaims: Reclaims, gate: ActivityGate | None = None) -> ExpiryWatch:
    return ExpiryWatch(ExpiryClock(MARGIN, time.monotonic), reclaims, gate=gate)


async def run_for(watch: ExpiryWatch, seconds: float) -> None:
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(seconds)
    task.cancel()


def test_an_unrenewed_lease_is_reclaimed_once_after_duration_and_margin() -> None:
    async def scenario() -> tuple[Reclaims, float]:
        reclaims = Reclaims()
        watch = new_watch(reclaims)
        began = time.monotonic()
        watch.observe(lease("a"))
        await run_for(watch, DURATION + MARGIN + 0.6)
        return reclaims, began

    reclaims, began = asyncio.run(scenario())
    assert [(n, g) for n, g, _ in reclaims.calls] == [("a", 1)]
    assert reclaims.calls[0][2] - began >= DURATION + MARGIN


def test_the_reclaim_gets_the_lease_as_watched_without_its_managed_fields() -> None:
    watched = lease("a")
    watched["metadata"] |= {"resourceVersion": "42", "managedFields": [{"manager": "x"}]}

    async def scenario() -> Reclaims:
        reclaims = Reclaims()
        watch = new_watch(reclaims)
        watch.observe(watched)
        await run_for(watch, DURATION + MARGIN + 0.6)
        return reclaims

    [body] = asyncio.run(scenario()).bodies
    assert "managedFields" not in body["metadata"]
    expected = {k: v for k, v in watched["metadata"].items() if k != "managedFields"}
    assert body["metadata"] == expected  # resourceVersion kept: the reclaim's precondition
    assert body["spec"] == watched["spec"]


def test_a_renewal_moves_the_deadline() -> None:
    async def scenario() -> Reclaims:
        reclaims = Reclaims()
        watch = new_watch(reclaims)
        task = asyncio.create_task(watch.run())
        watch.observe(lease("a", generation=1))
        await asyncio.sleep(0.7)
        watch.observe(lease("a", generation=2))  # renewed: a new spec generation
        await asyncio.sleep(0.7)  # past the first deadline (1.1 s), before the second
        seen_before = list(reclaims.calls)
        await asyncio.sleep(0.6)
        task.cancel()
        assert seen_before == []
        return reclaims

    reclaims = asyncio.run(scenario())
    assert [(n, g) for n, g, _ in reclaims.calls] == [("a", 2)]


def test_released_and_deleted_leases_are_not_reclaimed() -> None:
    async def scenario() -> Reclaims:
        reclaims = Reclaims()
        watch = new_watch(reclaims)
        watch.observe(lease("released"))
        watch.observe(lease("released", generation=2, holder=None))
        watch.observe(lease("deleted"))
        watch.observe(lease("deleted"), deleted=True)
        await run_for(watch, DURATION + MARGIN + 0.5)
        return reclaims

    assert asyncio.run(scenario()).calls == []


def test_a_burst_of_expiries_is_reclaimed_side_by_side() -> None:
    """20 leases expire together and each reclaim takes 0.3 s: not one after another."""

    async def scenario() -> Reclaims:
        reclaims = Reclaims(seconds=0.3)
        watch = new_watch(reclaims)
        for i in range(20):
            watch.observe(lease(f"l{i}"))
        await run_for(watch, DURATION + MARGIN + 1.5)  # 20 x 0.3 s in a row would be 6 s
        return reclaims

    reclaims = asyncio.run(scenario())
    assert sorted(n for n, _, _ in reclaims.calls) == sorted(f"l{i}" for i in range(20))
    assert reclaims.most_at_once == 20


def test_a_failed_reclaim_is_tried_again() -> None:
    async def scenario() -> Reclaims:
        reclaims = Reclaims(fail_first=True)
        watch = new_watch(reclaims)
        watch.observe(lease("a"))
        await run_for(watch, DURATION + MARGIN + 1.6)  # the retry comes 1 s later
        return reclaims

    reclaims = asyncio.run(scenario())
    assert [(n, g) for n, g, _ in reclaims.calls] == [("a", -1), ("a", 1)]
    assert reclaims.calls[1][2] - reclaims.calls[0][2] >= 1.0


def test_no_reclaim_while_a_peer_is_active_then_it_happens() -> None:
    async def scenario() -> tuple[list[Any], Reclaims]:
        gate = ActivityGate("me", 1, "leasehold", standalone=False)
        gate.expect("ns")  # closed: no peering object seen yet
        reclaims = Reclaims()
        watch = new_watch(reclaims, gate)
        task = asyncio.create_task(watch.run())
        watch.observe(lease("a"))
        await asyncio.sleep(DURATION + MARGIN + 0.5)
        while_paused = list(reclaims.calls)
        gate.observe(
            WatchEvent(EventType.ADDED, {"metadata": {"name": "leasehold", "namespace": "ns"}})
        )
        await asyncio.sleep(0.3)
        task.cancel()
        return while_paused, reclaims

    while_paused, reclaims = asyncio.run(scenario())
    assert while_paused == []
    assert [(n, g) for n, g, _ in reclaims.calls] == [("a", 1)]


def test_a_closed_gate_keeps_the_heap_bounded_while_renewals_pour_in() -> None:
    """A standby replica sees every renewal; its timers must not pile up."""

    async def scenario() -> int:
        gate = ActivityGate("me", 1, "leasehold", standalone=False)
        gate.expect("ns")  # closed
        reclaims = Reclaims()
        watch = new_watch(reclaims, gate)
        task = asyncio.create_task(watch.run())
        watch.observe(lease("stalled"))  # comes due while closed
        for generation in range(1, 80):  # another lease renewed every 40 ms
            watch.observe(lease("busy", generation=generation))
            await asyncio.sleep(0.04)
        task.cancel()
        assert reclaims.calls == []
        return len(watch._heap)

    # Renewals within one lease window (1.1 s / 40 ms ~ 28) plus the stalled
    # lease; a loop blocked on the gate would hold all 80.
    assert asyncio.run(scenario()) <= 32


# -- starting is not stalling (no timers run: the injected clock is read) --------


class Mono:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def push_lease(generation: int, holder: str | None = "job-1", **spec: Any) -> dict[str, Any]:
    body = lease("job", generation=generation, holder=holder)
    body["spec"].update({"leaseDurationSeconds": 3, "startupDeadlineSeconds": 60, **spec})
    return body


def left(watch: ExpiryWatch, name: str) -> tuple[ExpiryReason, float]:
    found = watch.remaining("ns", name)
    assert found is not None
    return found[0], round(found[1], 6)


def startup_watch() -> tuple[ExpiryWatch, Mono]:
    mono = Mono()
    return ExpiryWatch(ExpiryClock(MARGIN, mono), Reclaims(), monotonic=mono), mono


def test_a_claimed_attempt_is_bounded_by_startup_until_its_first_renewal() -> None:
    watch, mono = startup_watch()
    watch.observe(push_lease(1, acquireTime="t0", renewTime="t0"))
    mono.now += 10  # Pending for longer than the lease: not expired
    assert left(watch, "job") == (ExpiryReason.STARTUP_DEADLINE_EXCEEDED, round(50 + MARGIN, 6))
    watch.observe(push_lease(2, acquireTime="t0", renewTime="t1"))  # first renewal
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(3 + MARGIN, 6))
    mono.now += 1
    watch.observe(push_lease(2, acquireTime="t0", renewTime="t1"))  # no change
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(2 + MARGIN, 6))


def test_a_running_pod_starts_the_clock_even_without_renewals() -> None:
    # A running pod's first renewal is due within two lease durations (3 s here):
    # one for its `leasehold run` to start, one as for any renewal.
    watch, mono = startup_watch()
    assert not watch.started("ns", "job", "job-1", 1, running=True)  # before the claim is seen
    watch.observe(push_lease(1))
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(6 + MARGIN, 6))
    watch.observe(push_lease(2, holder=None))
    watch.observe(push_lease(3, holder="job-2", fencingToken=2))
    mono.now += 5
    assert not watch.started("ns", "job", "job-1", 1, running=True)  # an old attempt's pod
    assert left(watch, "job") == (ExpiryReason.STARTUP_DEADLINE_EXCEEDED, round(55 + MARGIN, 6))
    assert watch.started("ns", "job", "job-2", 2, running=True)
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(6 + MARGIN, 6))


def test_the_start_grace_ends_at_the_first_renewal() -> None:
    watch, mono = startup_watch()
    watch.observe(push_lease(1, acquireTime="t0", renewTime="t0"))
    assert watch.started("ns", "job", "job-1", 1, running=True)
    mono.now += 1
    # The operator's bind-like write without a renewal keeps the grace.
    watch.observe(push_lease(2, acquireTime="t0", renewTime="t0", holderUID="u"))
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(6 + MARGIN, 6))
    mono.now += 1
    watch.observe(push_lease(3, acquireTime="t0", renewTime="t1", holderUID="u"))  # renewed
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(3 + MARGIN, 6))
    mono.now += 1
    watch.observe(push_lease(4, acquireTime="t0", renewTime="t1", holderUID="u", x=1))
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(3 + MARGIN, 6))
    assert not watch.started("ns", "job", "job-1", 1, running=True)  # seen again: no new grace
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(3 + MARGIN, 6))


def test_a_pod_seen_running_after_its_first_renewal_gets_no_grace() -> None:
    watch, _ = startup_watch()
    watch.observe(push_lease(1, acquireTime="t0", renewTime="t0"))
    watch.observe(push_lease(2, acquireTime="t0", renewTime="t1"))  # renewed first
    assert not watch.started("ns", "job", "job-1", 1, running=True)
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(3 + MARGIN, 6))


def test_an_older_attempts_pod_event_does_not_hide_the_newer_ones() -> None:
    # Pod 2 runs before claim 2 is seen; then pod 1's deletion comes in.
    watch, _ = startup_watch()
    watch.observe(push_lease(1, acquireTime="t0", renewTime="t0"))
    watch.observe(push_lease(2, holder=None))
    assert not watch.started("ns", "job", "job-2", 2, running=True)
    assert not watch.started("ns", "job", "job-1", 1, running=False)
    watch.observe(push_lease(3, holder="job-2", fencingToken=2, acquireTime="t1", renewTime="t1"))
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(6 + MARGIN, 6))


def test_the_start_grace_is_one_lease_duration_at_most_a_minute() -> None:
    assert start_grace_seconds(3) == 3.0
    assert start_grace_seconds(3600) == START_GRACE_MAX_SECONDS == 60.0
    watch, _ = startup_watch()
    watch.observe(push_lease(1, leaseDurationSeconds=3600))
    assert watch.started("ns", "job", "job-1", 1, running=True)
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(3660 + MARGIN, 6))


def test_a_pod_that_ended_before_its_first_renewal_has_no_start_grace() -> None:
    watch, mono = startup_watch()
    watch.observe(push_lease(1, acquireTime="t0", renewTime="t0"))
    assert watch.started("ns", "job", "job-1", 1, running=True)
    mono.now += 1
    assert watch.started("ns", "job", "job-1", 1, running=False)  # it exited: never renews
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(2 + MARGIN, 6))
    assert not watch.started("ns", "job", "job-1", 1, running=False)  # seen again: no change
    # Ended before the claim was even seen (the pod's event first): no grace either.
    other, _ = startup_watch()
    assert not other.started("ns", "job", "job-1", 1, running=False)
    other.observe(push_lease(1, acquireTime="t0", renewTime="t0"))
    assert left(other, "job") == (ExpiryReason.LEASE_EXPIRED, round(3 + MARGIN, 6))


def test_a_pod_that_ends_in_its_grace_is_reclaimed_a_lease_duration_after_it_ran() -> None:
    # The timer itself (not only remaining()): the grace's end is pushed to the heap.
    async def scenario() -> tuple[Reclaims, float]:
        reclaims = Reclaims()
        watch = new_watch(reclaims)
        body = lease("gone")
        body["spec"]["startupDeadlineSeconds"] = 60
        body["spec"]["holderIdentity"] = "gone-1"
        body["spec"]["leaseDurationSeconds"] = 2
        watch.observe(body)
        began = time.monotonic()
        assert watch.started("ns", "gone", "gone-1", 1, running=True)
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.2)
        assert watch.started("ns", "gone", "gone-1", 1, running=False)  # it exited
        await asyncio.sleep(2 + MARGIN + 0.6)
        task.cancel()
        return reclaims, began

    reclaims, began = asyncio.run(scenario())
    assert [name for name, _, _ in reclaims.calls] == ["gone"]
    assert 2 + MARGIN <= reclaims.calls[0][2] - began < 2 * 2 + MARGIN


def test_an_unrenewed_running_pod_is_reclaimed_after_two_durations() -> None:
    async def scenario() -> tuple[Reclaims, float]:
        reclaims = Reclaims()
        watch = new_watch(reclaims)
        body = lease("slow")
        body["spec"]["startupDeadlineSeconds"] = 60
        body["spec"]["holderIdentity"] = "slow-1"
        watch.observe(body)
        began = time.monotonic()
        assert watch.started("ns", "slow", "slow-1", 1, running=True)
        await run_for(watch, 2 * DURATION + MARGIN + 0.5)
        return reclaims, began

    reclaims, began = asyncio.run(scenario())
    assert [name for name, _, _ in reclaims.calls] == ["slow"]
    assert reclaims.calls[0][2] - began >= 2 * DURATION + MARGIN


def test_pull_mode_and_renewed_leases_at_first_sight_are_started() -> None:
    watch, _ = startup_watch()
    pull = lease("pool", generation=1)
    pull["spec"]["leaseDurationSeconds"] = 3
    watch.observe(pull)
    assert left(watch, "pool") == (ExpiryReason.LEASE_EXPIRED, round(3 + MARGIN, 6))
    watch.observe(push_lease(5, acquireTime="t0", renewTime="t9"))  # an operator restart
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(3 + MARGIN, 6))


def test_a_claim_not_for_the_operators_pod_is_started_at_once() -> None:
    watch, mono = startup_watch()
    watch.observe(push_lease(1, acquireTime="t0", renewTime="t0"))
    assert left(watch, "job")[0] == ExpiryReason.STARTUP_DEADLINE_EXCEEDED
    watch.observe(push_lease(2, holder=None))  # reclaimed
    # A worker's SDK claim of the unheld lease: no pod of the operator's starts for it.
    watch.observe(push_lease(3, holder="pull-0", fencingToken=2, acquireTime="t1", renewTime="t1"))
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(3 + MARGIN, 6))
    mono.now += 1
    watch.observe(push_lease(3, holder="pull-0", fencingToken=2, acquireTime="t1", renewTime="t1"))
    assert left(watch, "job") == (ExpiryReason.LEASE_EXPIRED, round(2 + MARGIN, 6))


def test_an_index_attempt_is_bounded_by_startup_until_its_first_renewal() -> None:
    # An index lease (job "big", index 2) held for the operator's pod big-2-1
    # was taken for an SDK claim (the pod name was compared with "big-1"): its
    # lease duration ran from the claim, and a pod Pending longer was reclaimed.
    watch, mono = startup_watch()
    body = push_lease(1, holder="big-2-1", jobName="big", acquireTime="t0", renewTime="t0")
    body["metadata"]["name"] = "big.2"
    body["metadata"]["labels"] = {"leasehold.dev/completion-index": "2"}
    watch.observe(body)
    mono.now += 10  # Pending for longer than the lease: not expired
    assert left(watch, "big.2") == (ExpiryReason.STARTUP_DEADLINE_EXCEEDED, round(50 + MARGIN, 6))
