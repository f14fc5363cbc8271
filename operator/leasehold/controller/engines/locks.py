"""One lock per job: two triggers for the same job never interleave in this process.

Why this module exists: a lease event, an expiry and a requeue can all reach
one job at once; its reconciles and reclaims run one at a time. Across
processes every lease write is a compare-and-swap, so a second operator could
not double-claim either. A job's lock lives while a thread holds or waits for
it, so the map does not grow with every job name ever seen.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class JobLocks:
    """Per-job locks keyed by ``namespace/name``, with their users counted.

    A lock is removed once its job is gone and no thread holds or waits for
    it; a thread that asks for it afterwards gets a new one, which is safe:
    nothing else holds the old one by then.
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[threading.Lock, int]] = {}
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, namespace: str, name: str) -> Iterator[None]:
        """Hold the job's lock for the block (blocks while another thread holds it).

        Args:
            namespace: the job's namespace.
            name: the job's name.
        """
        key = f"{namespace}/{name}"
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users <= 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        """The number of jobs whose lock is held or waited for now."""
        with self._guard:
            return len(self._locks)
