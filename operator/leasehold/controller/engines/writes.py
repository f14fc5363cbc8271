"""The object versions this operator wrote, so their watch events need no reconcile."""

from __future__ import annotations

import threading


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
