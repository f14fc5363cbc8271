"""The work queue: one reconcile per job at a time, parked while a peer replica works."""

from __future__ import annotations

import asyncio

from leasehold.controller.engines.queue import WorkQueue


def test_a_timer_that_fires_while_a_peer_works_is_parked_then_run_on_take_over() -> None:
    # Issue 27, case 11: a schedule time (or a backoff, a deadline, a TTL) that
    # came due while this replica was paused used to be dropped, not re-armed.
    async def scenario() -> tuple[list[str], list[str], frozenset[tuple[str, str]]]:
        allowed = False
        ran: list[str] = []

        def work(namespace: str, name: str) -> None:
            ran.append(f"{namespace}/{name}")

        queue = WorkQueue(work, 0.1, may_work=lambda: allowed)
        queue.trigger_after("ns", "nightly", 0.01)
        queue.trigger("ns", "job")
        await asyncio.sleep(0.1)
        while_paused, parked = list(ran), queue.parked
        allowed = True
        queue.resume_parked()
        while len(ran) < 2:
            await asyncio.sleep(0.01)
        return while_paused, ran, parked

    while_paused, ran, parked = asyncio.run(scenario())
    assert while_paused == []
    assert parked == {("ns", "nightly"), ("ns", "job")}
    assert sorted(ran) == ["ns/job", "ns/nightly"]


def test_triggers_during_a_reconcile_coalesce_into_one_more() -> None:
    async def scenario() -> int:
        calls = 0
        started = asyncio.Event()
        release = asyncio.Event()
        loop = asyncio.get_running_loop()

        def work(namespace: str, name: str) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                loop.call_soon_threadsafe(started.set)
                asyncio.run_coroutine_threadsafe(release.wait(), loop).result()

        queue = WorkQueue(work, 0.1)
        queue.trigger("ns", "job")
        await started.wait()
        for _ in range(5):
            queue.trigger("ns", "job")
        release.set()
        while calls < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        return calls

    assert asyncio.run(scenario()) == 2
