"""What this operator wrote: versions (their watch events need no reconcile), status write times."""

from __future__ import annotations

import threading
from typing import Final


class OwnWrites:
    """The versions this operator wrote, so their watch events need no reconcile.

    A reconcile that writes (a claim, a reclaim, a status) has already acted
    on what it wrote; the watch event of that very version carries nothing
    new, and reconciling it again costs two reads. Any other change has
    another ``resourceVersion`` and is reconciled as always. An event that
    arrives before its write is recorded is simply reconciled (the old
    behaviour), so a race here costs reads, never a missed change.

    Thread-safe: recorded from reconcile threads, checked on the event loop.
    """

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()

    def record(self, kind: str, namespace: str, name: str, resource_version: str) -> None:
        """Note that this process wrote ``resource_version`` of an object.

        Args:
            kind: ``JobLease`` or ``LeasedJob``.
            namespace: the object's namespace.
            name: the object's name.
            resource_version: the version the write produced.
        """
        if resource_version:
            with self._lock:
                self._versions[(kind, namespace, name)] = resource_version

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """The object is gone: drop what was recorded for it.

        Args:
            kind: ``JobLease`` or ``LeasedJob``.
            namespace: the object's namespace.
            name: the object's name.
        """
        with self._lock:
            self._versions.pop((kind, namespace, name), None)

    def is_own(self, kind: str, namespace: str, name: str, resource_version: str | None) -> bool:
        """Whether this version is one this process wrote (forgets it if so).

        Args:
            kind: ``JobLease`` or ``LeasedJob``.
            namespace: the object's namespace.
            name: the object's name.
            resource_version: the version a watch event carries.

        Returns:
            ``True`` exactly once for a recorded version.
        """
        key = (kind, namespace, name)
        with self._lock:
            if resource_version and self._versions.get(key) == resource_version:
                del self._versions[key]
                return True
            return False


STATUS_WRITE_INTERVAL_SECONDS: Final = 1.0
"""At most one status write per job this often while only counts change
(:func:`leasehold.controller.plan.coalesce.may_wait`); a count held back is
written when the interval ends (the reconcile asks to be run again then).
``OperatorSettings.status_write_interval_seconds`` sets it."""


class StatusWriteClock:
    """When each job's status was last written here, and how long a count may wait.

    A change of a job's status that only moves counts (``ready``, ``active``,
    ...) is held back while the job's last write is younger than the
    interval, and written with the next write or when the interval ends.
    Times are the caller's monotonic seconds. Thread-safe: reconciles of
    different jobs write at once.

    Args:
        interval_seconds: the least time between two writes of counts alone
            (0: every change is written at once).
    """

    def __init__(self, interval_seconds: float = STATUS_WRITE_INTERVAL_SECONDS) -> None:
        self.interval_seconds = interval_seconds
        self._written: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def wait_left(self, namespace: str, name: str, now: float) -> float:
        """Seconds until a count-only change of the job may be written (0: now).

        Args:
            namespace: the job's namespace.
            name: the job's name.
            now: monotonic seconds.

        Returns:
            The rest of the interval since the job's last write here; 0 when
            none was written here (a first write, or after a restart) or the
            interval has passed.
        """
        with self._lock:
            last = self._written.get((namespace, name))
        return 0.0 if last is None else max(0.0, last + self.interval_seconds - now)

    def wrote(self, namespace: str, name: str, now: float) -> None:
        """The job's status was written at ``now`` (monotonic seconds)."""
        with self._lock:
            self._written[(namespace, name)] = now

    def forget(self, namespace: str, name: str) -> None:
        """The job finished or is gone: keep no time for it."""
        with self._lock:
            self._written.pop((namespace, name), None)
