"""The work queue: one reconcile per job at a time, urgent ones first, parked while a peer works."""

from __future__ import annotations

import asyncio
import threading
import time

from leasehold.controller.engines.queue import URGENT_IN_A_ROW, Lanes, WorkQueue


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


def _ordered(triggers: list[tuple[str, bool]], workers: int = 1) -> list[str]:
    """The order reconciles ran in: ``first`` runs (and blocks), then ``triggers`` queue.

    ``triggers``: ``(job name, urgent)`` in the order they are made while
    ``first`` holds the only slot.
    """

    async def scenario() -> list[str]:
        ran: list[str] = []
        started = asyncio.Event()
        release = asyncio.Event()
        loop = asyncio.get_running_loop()

        def work(namespace: str, name: str) -> None:
            ran.append(name)
            if name == "first":
                loop.call_soon_threadsafe(started.set)
                asyncio.run_coroutine_threadsafe(release.wait(), loop).result()

        queue = WorkQueue(work, 0.1, workers=workers)
        queue.trigger("ns", "first")
        await started.wait()
        for name, urgent in triggers:
            queue.trigger("ns", name, urgent=urgent)
            await asyncio.sleep(0)  # each task reaches its lane in trigger order
        await asyncio.sleep(0.01)
        release.set()
        expected = 1 + len({name for name, _ in triggers})
        while len(ran) < expected:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # nothing more runs
        return ran

    return asyncio.run(scenario())


def test_a_completion_goes_before_the_starts_that_wait() -> None:
    # Issue 29: 200 starts queued ahead of a completion kept the job's
    # Succeeded waiting 24-42 s; first come, first served would give
    # first, start-1, start-2, start-3, done.
    order = _ordered([("start-1", False), ("start-2", False), ("start-3", False), ("done", True)])
    assert order == ["first", "done", "start-1", "start-2", "start-3"]


def test_a_waiting_reconcile_is_promoted_by_an_urgent_trigger_and_runs_once() -> None:
    order = _ordered([("start-1", False), ("job", False), ("start-2", False), ("job", True)])
    assert order == ["first", "job", "start-1", "start-2"]


def test_the_other_lane_gets_a_slot_after_urgent_in_a_row() -> None:
    # Never starved: after URGENT_IN_A_ROW urgent reconciles, one other goes.
    urgent = [(f"done-{i}", True) for i in range(2 * URGENT_IN_A_ROW + 1)]
    order = _ordered([("start-1", False), ("start-2", False), *urgent])
    first_start = order.index("start-1")
    assert first_start == 1 + URGENT_IN_A_ROW
    assert order[1:first_start] == [f"done-{i}" for i in range(URGENT_IN_A_ROW)]
    assert order.index("start-2") == first_start + 1 + URGENT_IN_A_ROW


def test_an_urgent_trigger_during_a_run_makes_the_rerun_urgent() -> None:
    async def scenario() -> list[str]:
        ran: list[str] = []
        started = asyncio.Event()
        release = asyncio.Event()
        loop = asyncio.get_running_loop()

        def work(namespace: str, name: str) -> None:
            ran.append(name)
            if len(ran) == 1:
                loop.call_soon_threadsafe(started.set)
                asyncio.run_coroutine_threadsafe(release.wait(), loop).result()

        queue = WorkQueue(work, 0.1, workers=1)
        queue.trigger("ns", "job")
        await started.wait()
        queue.trigger("ns", "start")
        await asyncio.sleep(0)
        queue.trigger("ns", "job", urgent=True)  # e.g. its lease completed meanwhile
        await asyncio.sleep(0)
        release.set()
        while len(ran) < 3:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        return ran

    assert asyncio.run(scenario()) == ["job", "job", "start"]


def test_no_more_reconciles_run_at_once_than_workers() -> None:
    async def scenario() -> int:
        running = 0
        most = 0
        calls = 0
        lock = threading.Lock()

        def work(namespace: str, name: str) -> None:
            nonlocal running, most, calls
            with lock:
                calls += 1
                running += 1
                most = max(most, running)
            time.sleep(0.02)
            with lock:
                running -= 1

        queue = WorkQueue(work, 0.1, workers=3)
        for i in range(12):
            queue.trigger("ns", f"job-{i}", urgent=i % 2 == 0)
        while calls < 12 or running:
            await asyncio.sleep(0.01)
        return most

    assert asyncio.run(scenario()) == 3


def test_a_reconcile_that_waits_for_a_slot_is_parked_if_a_peer_takes_over() -> None:
    async def scenario() -> tuple[list[str], frozenset[tuple[str, str]]]:
        allowed = True
        ran: list[str] = []
        started = asyncio.Event()
        release = asyncio.Event()
        loop = asyncio.get_running_loop()

        def work(namespace: str, name: str) -> None:
            ran.append(name)
            if name == "first":
                loop.call_soon_threadsafe(started.set)
                asyncio.run_coroutine_threadsafe(release.wait(), loop).result()

        queue = WorkQueue(work, 0.1, may_work=lambda: allowed, workers=1)
        queue.trigger("ns", "first")
        await started.wait()
        queue.trigger("ns", "waits", urgent=True)
        await asyncio.sleep(0)
        allowed = False  # a peer took over while it waited for the slot
        release.set()
        await asyncio.sleep(0.1)
        return ran, queue.parked

    ran, parked = asyncio.run(scenario())
    assert ran == ["first"]
    assert parked == {("ns", "waits")}


def test_a_promoted_key_that_waits_again_takes_a_new_place() -> None:
    # Its place in the other lane from before its promotion is not its place now.
    async def scenario() -> list[str]:
        lanes = Lanes(1)
        order: list[str] = []
        await lanes.acquire(("ns", "first"), urgent=False)

        async def wait(name: str) -> None:
            await lanes.acquire(("ns", name), urgent=False)
            order.append(name)

        tasks = [asyncio.create_task(wait("b")), asyncio.create_task(wait("c"))]
        await asyncio.sleep(0)
        lanes.promote(("ns", "c"))
        lanes.release()  # c: the urgent lane
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(wait("d")), asyncio.create_task(wait("c"))]
        await asyncio.sleep(0)
        for _ in range(3):
            lanes.release()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == ["c", "b", "d", "c"]


def test_a_rerun_cancelled_while_it_waits_for_a_slot_gives_it_back_once() -> None:
    """A re-run queues holding its slot (``acquire`` gives it back): a cancel must not free two.

    One slot: job ``a`` runs, ``b`` waits, ``a`` is triggered again (its re-run
    queues behind ``b`` and hands its slot over); ``a``'s task is cancelled
    while it waits (as at shutdown). One slot is free once ``b`` is done, not two.
    """

    async def scenario() -> int:
        a_started, a_go, b_go = threading.Event(), threading.Event(), threading.Event()

        def work(_: str, name: str) -> None:
            if name == "a":
                a_started.set()
                a_go.wait(5)
            else:
                b_go.wait(5)

        queue = WorkQueue(work, 0.01, workers=1)
        queue.trigger("ns", "a")
        (a_task,) = queue._tasks
        await asyncio.to_thread(a_started.wait, 5)
        queue.trigger("ns", "b")  # waits for the slot
        queue.trigger("ns", "a")  # a re-run, queued behind b
        a_go.set()
        await asyncio.sleep(0.1)  # a's first run ended: its re-run waits, b runs
        a_task.cancel()
        await asyncio.sleep(0.05)
        b_go.set()
        await asyncio.sleep(0.1)
        assert queue._lanes is not None
        return queue._lanes._free

    assert asyncio.run(scenario()) == 1
