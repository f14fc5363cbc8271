"""How long each LeasedJob has run, without comparing wall clocks of different processes.

Why this module exists: ``activeDeadlineSeconds`` counts from the job's
creation, which the API server stamped with its own clock. The operator's
wall clock may be hours off from it, and a restarted operator's clock may
differ from the one that ran before (docs/lifecycle.md, "Deadlines").
So elapsed time is measured in two parts: at first sight of a job, the API
server's own clocks give how long ago it was created (the ``Date`` header of
the response that read it, minus ``metadata.creationTimestamp``); from then
on the operator's monotonic clock adds the rest. No wall clock of this
process is ever read. Both server timestamps have one-second resolution, so
the answer is good to within a second.

Pure bookkeeping with an injected monotonic clock: no Kubernetes or Kopf.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from leasehold.lease.protocol import MonotonicClock


@dataclass(frozen=True)
class _Origin:
    uid: str
    created_at: float
    """The monotonic time at which the job was created (may be before this process)."""


class JobClocks:
    """Elapsed time per job since its creation, on this process's monotonic clock.

    Args:
        monotonic: the clock, injected for tests.
    """

    def __init__(self, monotonic: MonotonicClock) -> None:
        self._monotonic = monotonic
        self._origins: dict[str, _Origin] = {}

    def elapsed_seconds(
        self, key: str, uid: str, created: datetime, server_now: datetime | None
    ) -> float:
        """Seconds since job ``key`` was created.

        The first call for a job (or for a new ``uid`` under the same key)
        anchors it: ``server_now - created`` (both API server times) is how
        old it is at this monotonic moment. Later calls only read the
        monotonic clock; their server times are ignored.

        Args:
            key: the job's ``namespace/name``.
            uid: its ``metadata.uid`` (a recreated job starts again).
            created: its ``metadata.creationTimestamp``.
            server_now: the API server's time when it answered the read
                (``Date`` header), or ``None`` if unknown (then the job
                counts from now: late, never early).

        Returns:
            Seconds (``>= 0``).
        """
        origin = self._origins.get(key)
        if origin is None or origin.uid != uid:
            now = self._monotonic()
            age = 0.0 if server_now is None else (server_now - created).total_seconds()
            origin = _Origin(uid, now - max(0.0, age))
            self._origins[key] = origin
        return max(0.0, self._monotonic() - origin.created_at)

    def knows(self, key: str, uid: str) -> bool:
        """Whether job ``key`` (incarnation ``uid``) is anchored: its age needs no server time.

        Args:
            key: the job's ``namespace/name``.
            uid: its ``metadata.uid``.

        Returns:
            ``True`` once :meth:`elapsed_seconds` was called for it.
        """
        origin = self._origins.get(key)
        return origin is not None and origin.uid == uid

    def forget(self, key: str) -> None:
        """The job is gone (or finished): drop its anchor.

        Args:
            key: the job's ``namespace/name``.
        """
        self._origins.pop(key, None)
