"""What the operator does with one JobLease watch event (Runtime.on_lease_event)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from leasehold.controller.engines.caches import ObjectCache
from leasehold.controller.engines.expiry import ExpiryClock, ExpiryWatch
from leasehold.controller.engines.peering import ActivityGate
from leasehold.controller.engines.queue import WorkQueue
from leasehold.controller.engines.watching import EventType, WatchEvent
from leasehold.controller.engines.writes import OwnWrites
from leasehold.controller.runtime import Actors, Runtime
from leasehold.controller.settings import OperatorSettings


class Queue:
    def __init__(self) -> None:
        self.triggered: list[tuple[str, str]] = []
        self.urgent: list[bool] = []

    def trigger(self, namespace: str, name: str, *, urgent: bool = False) -> None:
        self.triggered.append((namespace, name))
        self.urgent.append(urgent)


class Context:
    def __init__(self) -> None:
        self.own_writes = OwnWrites()
        self.lease_cache = ObjectCache()


class Service:
    def __init__(self) -> None:
        self.ctx = Context()


def body(holder: str | None, token: int, rv: str, generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "job",
            "uid": "u1",
            "generation": generation,
            "resourceVersion": rv,
        },
        "spec": {"jobName": "job", "holderIdentity": holder, "fencingToken": token},
    }


def runtime(gate: ActivityGate, queue: Any = None) -> tuple[Runtime, Queue, Service]:
    async def never(*_: Any) -> None:
        raise AssertionError("no reclaim expected")

    queue, service = queue or Queue(), Service()
    expiry = ExpiryWatch(ExpiryClock(1.0, time.monotonic), never, gate=gate)
    rt = Runtime(
        OperatorSettings(),
        cast(Actors, service),
        cast(Any, queue),
        expiry,
        gate,
        lambda: cast(Any, None),
    )
    return rt, queue, service


def test_first_list_feeds_the_timers_but_does_not_reconcile() -> None:
    async def scenario() -> list[tuple[str, str]]:
        rt, queue, _ = runtime(ActivityGate("me", 0, "p", standalone=True))
        rt.on_lease_event(WatchEvent(EventType.LISTED, body("w", 1, "10"), initial=True))
        rt.on_lease_event(WatchEvent(EventType.MODIFIED, body(None, 1, "11", 2)))
        return queue.triggered

    # The first LIST: nothing; the release that follows: the job.
    assert asyncio.run(scenario()) == [("ns", "job")]


def test_lease_events_feed_the_lease_cache_reconciles_read() -> None:
    async def scenario() -> Service:
        rt, _, service = runtime(ActivityGate("me", 0, "p", standalone=True))
        service.ctx.lease_cache.watched = True
        rt.on_lease_event(WatchEvent(EventType.LISTED, body("w", 1, "10"), initial=True))
        rt.on_lease_event(WatchEvent(EventType.MODIFIED, body(None, 1, "11", 2)))
        return service

    service = asyncio.run(scenario())
    assert service.ctx.lease_cache.get("ns", "job") == body(None, 1, "11", 2)

    async def deleted() -> Service:
        rt, _, service = runtime(ActivityGate("me", 0, "p", standalone=True))
        service.ctx.lease_cache.watched = True
        rt.on_lease_event(WatchEvent(EventType.ADDED, body("w", 1, "10")))
        rt.on_lease_event(WatchEvent(EventType.DELETED, body("w", 1, "10")))
        return service

    assert asyncio.run(deleted()).ctx.lease_cache.get("ns", "job") is None


def test_own_write_is_skipped_only_as_a_modified_event() -> None:
    async def scenario() -> list[tuple[str, str]]:
        rt, queue, service = runtime(ActivityGate("me", 0, "p", standalone=True))
        rt.on_lease_event(WatchEvent(EventType.ADDED, body("w", 1, "10")))
        service.ctx.own_writes.record("JobLease", "ns", "job", "11")
        rt.on_lease_event(WatchEvent(EventType.MODIFIED, body(None, 1, "11", 2)))  # own
        service.ctx.own_writes.record("JobLease", "ns", "job", "12")
        rt.on_lease_event(WatchEvent(EventType.LISTED, body("w", 2, "12", 3)))  # a re-list
        return queue.triggered

    assert asyncio.run(scenario()) == [("ns", "job"), ("ns", "job")]


def test_changes_while_a_peer_works_are_reconciled_when_this_replica_takes_over() -> None:
    async def scenario() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        gate = ActivityGate("me", 1, "leasehold", standalone=False)
        gate.expect("ns")  # closed
        reconciled: list[tuple[str, str]] = []

        def work(namespace: str, name: str) -> None:
            reconciled.append((namespace, name))

        queue = WorkQueue(work, 0.1, may_work=lambda: gate.is_open)
        gate.on_open(queue.resume_parked)
        rt, _, _ = runtime(gate, queue)
        rt.on_lease_event(WatchEvent(EventType.ADDED, body("w", 1, "10")))
        rt.on_lease_event(WatchEvent(EventType.MODIFIED, body(None, 1, "11", 2)))
        await asyncio.sleep(0.05)
        while_closed = list(reconciled)
        assert queue.parked == {("ns", "job")}
        peering = {"metadata": {"name": "leasehold", "namespace": "ns"}, "status": {}}
        gate.observe(WatchEvent(EventType.ADDED, peering))  # nobody outranks: open
        while not reconciled:
            await asyncio.sleep(0.01)
        return while_closed, reconciled

    while_closed, after = asyncio.run(scenario())
    assert while_closed == []
    assert after == [("ns", "job")]


def test_a_completion_or_an_ended_attempt_is_urgent_a_claim_or_renewal_is_not() -> None:
    def completed(rv: str) -> dict[str, Any]:
        done = body("w", 1, rv, 3)
        done["spec"]["completion"] = {"fencingToken": 1, "outcome": "Succeeded"}
        return done

    async def scenario() -> list[bool]:
        rt, queue, _ = runtime(ActivityGate("me", 0, "p", standalone=True))
        rt.on_lease_event(WatchEvent(EventType.ADDED, body(None, 0, "10")))  # created
        rt.on_lease_event(WatchEvent(EventType.MODIFIED, body("w", 1, "11", 2)))  # claimed
        rt.on_lease_event(WatchEvent(EventType.MODIFIED, completed("12")))  # completed
        rt.on_lease_event(WatchEvent(EventType.MODIFIED, body("v", 2, "13", 4)))  # claimed again
        rt.on_lease_event(WatchEvent(EventType.MODIFIED, body(None, 2, "14", 5)))  # released
        return queue.urgent

    assert asyncio.run(scenario()) == [False, False, True, False, True]
