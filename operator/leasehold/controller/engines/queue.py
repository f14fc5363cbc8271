"""A per-job work queue: one reconcile per job at a time, triggers coalesced, urgent first.

Why this module exists: LeasedJob events, lease changes and expiries all ask
for a job to be reconciled, often several at once. Reconciles of one job must
not overlap (each reads, decides and writes), and a burst of triggers should
cost one reconcile, not one each. A reconcile that would finish something (a
lease completed, an attempt ended) must not wait behind a burst of starts:
200 jobs created at once queue 200 starts of 5 requests each, and a job whose
worker completed would wait for all of them before its ``Succeeded`` is
written (issue 29: 24-42 s at n=200). Such triggers are *urgent*: their
reconciles take the next free slot before the others (:class:`Lanes`).
Plain asyncio: no Kopf.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Final

from leasehold.lease.errors import StoreError, TransientStoreError

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""A job's ``(namespace, name)``."""

URGENT_IN_A_ROW: Final = 4
"""Urgent reconciles granted in a row while others wait; then one other goes.

The other lane is never starved: while both lanes wait, at least one slot in
``URGENT_IN_A_ROW + 1`` goes to it, so a stream of completions slows the
starts to a fifth of the slots at worst, never to none."""


class Lanes:
    """A bounded number of slots, handed to urgent waiters before the others.

    A waiter is a job's key; each lane is first come, first served. While
    both lanes have waiters, the urgent lane gets :data:`URGENT_IN_A_ROW`
    slots in a row, then the other lane one. A waiting key can be promoted
    to the urgent lane (it keeps its place in the other lane too; whichever
    comes first grants it).

    Args:
        slots: reconciles that may run at once (the threads that run them).
    """

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._urgent: deque[tuple[Key, asyncio.Future[None]]] = deque()
        self._other: deque[tuple[Key, asyncio.Future[None]]] = deque()
        self._waiting: dict[Key, asyncio.Future[None]] = {}
        self._promoted: set[Key] = set()
        """Waiting keys with a place in the urgent lane."""
        self._in_a_row = 0

    @property
    def waiting(self) -> int:
        """Keys waiting for a slot (both lanes)."""
        return len(self._waiting)

    async def acquire(self, key: Key, *, urgent: bool, holding: bool = False) -> None:
        """Wait for a slot for ``key`` in its lane; :meth:`release` gives it back.

        Args:
            key: the job's key (at most one waiter per key: the queue runs one
                reconcile per job at a time).
            urgent: wait in the urgent lane.
            holding: the caller holds a slot and gives it back once queued
                (a re-run: it waits behind whoever waits in its lane before it).

        Raises:
            asyncio.CancelledError: cancelled while waiting (no slot is kept,
                the one given back with ``holding`` included).
        """
        if not holding and self._free > 0 and not self._waiting:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        if urgent:
            self._urgent.append((key, future))
            self._promoted.add(key)
        else:
            self._other.append((key, future))
        if holding:
            self.release()  # the next waiter, this one if it is first
        try:
            await future
        except asyncio.CancelledError:
            if self._waiting.get(key) is future:
                del self._waiting[key]  # its places in the lanes are skipped when reached
                self._promoted.discard(key)
            elif future.done() and not future.cancelled():
                self.release()  # granted, then cancelled before it ran
            raise

    def promote(self, key: Key) -> None:
        """Give a waiting ``key`` a place in the urgent lane (nothing if it does not wait)."""
        future = self._waiting.get(key)
        if future is not None and key not in self._promoted:
            self._urgent.append((key, future))
            self._promoted.add(key)

    def release(self) -> None:
        """Give a slot back: the next waiter, urgent first, gets it."""
        self._free += 1
        while self._free > 0:
            key = self._next()
            if key is None:
                return
            future = self._waiting.pop(key)
            self._promoted.discard(key)
            if not future.done():  # not cancelled meanwhile (its waiter cleans up)
                self._free -= 1
                future.set_result(None)

    def _next(self) -> Key | None:
        """The key the next slot goes to, or ``None`` when nobody waits."""
        for lane in (self._urgent, self._other):
            while lane and self._waiting.get(lane[0][0]) is not lane[0][1]:
                lane.popleft()  # granted through the other lane, or cancelled
        if self._urgent and (not self._other or self._in_a_row < URGENT_IN_A_ROW):
            self._in_a_row += 1
            return self._urgent.popleft()[0]
        self._in_a_row = 0
        return self._other.popleft()[0] if self._other else None


class WorkQueue:
    """Run at most one reconcile per job at a time, coalescing triggers, urgent ones first.

    A trigger while the job's reconcile runs marks it dirty: it runs once
    more afterwards. With ``workers``, at most that many reconciles run at
    once and a waiting reconcile whose job had an urgent trigger (a lease
    completed, an attempt ended: :meth:`trigger`) goes before the others
    (:class:`Lanes`); without, every reconcile goes to the thread pool at
    once, first come first served. Transient failures are retried after a
    delay (no slot is held meanwhile). While
    ``may_work()`` says no (a peer replica is the active one), a due
    reconcile (an event's, a timer's: a backoff, a deadline, a TTL, a
    schedule time) is parked, not dropped: :meth:`resume_parked` runs every
    parked one when this replica may work again.

    Args:
        work: the blocking function to run in a thread: ``work(namespace, name)``;
            it returns ``None``, or seconds after which the job needs another
            reconcile (a deadline, a backoff).
        retry_delay_seconds: delay before retrying after a transient error.
        may_work: whether this replica may reconcile now (``None``: always).
        workers: reconciles run at once, urgent ones first (``None``: no bound,
            no lanes). Give the number of threads that run them
            (``OperatorSettings.reconcile_workers``): more would queue in the
            pool first come first served again.
    """

    def __init__(
        self,
        work: Callable[[str, str], float | None],
        retry_delay_seconds: float,
        *,
        may_work: Callable[[], bool] | None = None,
        workers: int | None = None,
    ) -> None:
        self._work = work
        self._delay = retry_delay_seconds
        self._may_work = may_work
        self._lanes = Lanes(workers) if workers is not None else None
        self._running: set[Key] = set()
        self._dirty: set[Key] = set()
        self._urgent: set[Key] = set()
        self._parked: set[Key] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: dict[Key, asyncio.TimerHandle] = {}

    @property
    def parked(self) -> frozenset[tuple[str, str]]:
        """The (namespace, name) keys waiting for this replica to be allowed to work."""
        return frozenset(self._parked)

    def resume_parked(self) -> None:
        """Run every parked reconcile (call on the event loop when the replica may work)."""
        parked, self._parked = self._parked, set()
        for key in sorted(parked):
            self.trigger(*key)

    def trigger_after(self, namespace: str, name: str, delay_seconds: float) -> None:
        """Queue a reconcile of ``namespace/name`` in ``delay_seconds`` (one timer per job).

        A later call replaces the job's pending timer: the last reconcile knows
        best when the job next needs looking at.

        Args:
            namespace: the job's namespace.
            name: the job's name.
            delay_seconds: seconds from now, on the event loop's monotonic clock.
        """
        key = (namespace, name)
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self.trigger(namespace, name)

        self._timers[key] = asyncio.get_running_loop().call_later(max(0.0, delay_seconds), fire)

    def trigger(self, namespace: str, name: str, *, urgent: bool = False) -> None:
        """Queue a reconcile of ``namespace/name`` (must run in the event loop).

        Args:
            namespace: the job's namespace.
            name: the job's name.
            urgent: the reconcile would finish something (the job's lease
                completed, an attempt ended): it goes before the reconciles
                that wait without such a trigger, including this job's own
                if it already waits. Coalesced like any trigger.
        """
        key = (namespace, name)
        if urgent:
            self._urgent.add(key)
            if self._lanes is not None:
                self._lanes.promote(key)
        if key in self._running:
            self._dirty.add(key)
            return
        self._running.add(key)
        task = asyncio.get_running_loop().create_task(self._run(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: Key) -> None:
        held = False  # a slot of the lanes
        try:
            while True:
                if self._parks(key):
                    return
                if self._lanes is not None:
                    # A re-run queues in its lane before its slot is given back,
                    # so an urgent trigger during the run goes before the others.
                    # acquire gives a held slot back (even when cancelled): not ours now.
                    holding, held = held, False
                    await self._lanes.acquire(key, urgent=key in self._urgent, holding=holding)
                    held = True
                    if self._parks(key):  # a peer took over while it waited
                        return
                self._dirty.discard(key)  # the triggers so far: this run reads after them
                self._urgent.discard(key)
                retry = await self._once(key)
                if retry is not None:
                    if held and self._lanes is not None:
                        self._lanes.release()  # no slot held while it waits
                        held = False
                    await asyncio.sleep(retry)
                    self._dirty.add(key)
                if key not in self._dirty:
                    return
        finally:
            if held and self._lanes is not None:
                self._lanes.release()
            self._running.discard(key)

    async def _once(self, key: Key) -> float | None:
        """One reconcile of ``key``; seconds to wait before retrying it, or ``None``."""
        try:
            again = await asyncio.to_thread(self._work, *key)
            if again is not None:
                self.trigger_after(*key, again)
            return None
        except TransientStoreError as exc:
            log.info("reconcile %s/%s will be retried: %s", *key, exc)
            return self._delay
        except StoreError as exc:
            log.error("reconcile %s/%s failed: %s", *key, exc)
            return self._delay * 5
        except Exception:
            log.exception("reconcile %s/%s crashed; retrying later", *key)
            return self._delay * 5

    def _parks(self, key: Key) -> bool:
        """Park ``key`` if a peer works now (if this replica takes over, it runs then)."""
        if self._may_work is not None and not self._may_work():
            self._parked.add(key)
            self._dirty.discard(key)  # its run on take-over reads after every trigger
            return True
        return False
