"""A per-job work queue: one reconcile per job at a time, triggers coalesced.

Why this module exists: LeasedJob events, lease changes and expiries all ask
for a job to be reconciled, often several at once. Reconciles of one job must
not overlap (each reads, decides and writes), and a burst of triggers should
cost one reconcile, not one each. Plain asyncio: no Kopf.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from leasehold.lease.errors import StoreError, TransientStoreError

log = logging.getLogger(__name__)


class WorkQueue:
    """Run at most one reconcile per job at a time, coalescing triggers.

    A trigger while the job's reconcile runs marks it dirty: it runs once
    more afterwards. Transient failures are retried after a delay. While
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
    """

    def __init__(
        self,
        work: Callable[[str, str], float | None],
        retry_delay_seconds: float,
        *,
        may_work: Callable[[], bool] | None = None,
    ) -> None:
        self._work = work
        self._delay = retry_delay_seconds
        self._may_work = may_work
        self._running: set[tuple[str, str]] = set()
        self._dirty: set[tuple[str, str]] = set()
        self._parked: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

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

    def trigger(self, namespace: str, name: str) -> None:
        """Queue a reconcile of ``namespace/name`` (must run in the event loop)."""
        key = (namespace, name)
        if key in self._running:
            self._dirty.add(key)
            return
        self._running.add(key)
        task = asyncio.get_running_loop().create_task(self._run(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: tuple[str, str]) -> None:
        try:
            while True:
                self._dirty.discard(key)
                if self._may_work is not None and not self._may_work():
                    # A peer works now; if this replica takes over, it runs this then.
                    self._parked.add(key)
                    return
                try:
                    again = await asyncio.to_thread(self._work, *key)
                    if again is not None:
                        self.trigger_after(*key, again)
                except TransientStoreError as exc:
                    log.info("reconcile %s/%s will be retried: %s", *key, exc)
                    await asyncio.sleep(self._delay)
                    self._dirty.add(key)
                except StoreError as exc:
                    log.error("reconcile %s/%s failed: %s", *key, exc)
                    await asyncio.sleep(self._delay * 5)
                    self._dirty.add(key)
                except Exception:
                    log.exception("reconcile %s/%s crashed; retrying later", *key)
                    await asyncio.sleep(self._delay * 5)
                    self._dirty.add(key)
                if key not in self._dirty:
                    return
        finally:
            self._running.discard(key)
