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
    more afterwards. Transient failures are retried after a delay.

    Args:
        work: the blocking function to run in a thread: ``work(namespace, name)``.
        retry_delay_seconds: delay before retrying after a transient error.
    """

    def __init__(self, work: Callable[[str, str], object], retry_delay_seconds: float) -> None:
        self._work = work
        self._delay = retry_delay_seconds
        self._running: set[tuple[str, str]] = set()
        self._dirty: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

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
                try:
                    await asyncio.to_thread(self._work, *key)
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
