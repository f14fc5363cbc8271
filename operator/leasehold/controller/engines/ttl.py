"""``ttlSecondsAfterFinished``: when a finished LeasedJob is deleted, without wall clocks.

Why this module exists: a finished job (Succeeded or Failed, cancelled
included) and its pods stay until someone deletes them; batch/v1 Job's
``ttlSecondsAfterFinished`` deletes them that long after the job finished.
The time since it finished is measured as :mod:`leasehold.controller.engines.deadline`
measures a job's age, never with this process's wall clock: the finish is
the API server's time of the operator's last status write (the ``time`` of
its ``managedFields`` entry for the status subresource, stamped by the API
server), compared with the API server's ``Date`` of the read that saw it;
from then on this process's monotonic clock adds the rest. A later status
write by the operator moves that time later, never earlier, so a job may be
deleted late, never early. A job that finishes in this very reconcile counts
from the read.

The JobLease is not deleted with its job: it is the job name's fencing
domain (docs/lifecycle.md, "Across a job's whole life"), so a job created
again under the name goes on above every token the deleted one used.

Pure bookkeeping with an injected monotonic clock: no Kubernetes or Kopf.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from leasehold.controller.engines.deadline import JobClocks
from leasehold.lease.api import LeasedJob, LeasedJobStatus, Phase
from leasehold.lease.protocol import MonotonicClock

FINISHED = (Phase.SUCCEEDED, Phase.FAILED)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def is_finished(status: LeasedJobStatus | None) -> bool:
    """Whether ``status`` says the job finished (Succeeded or Failed).

    Args:
        status: a job's status, or ``None``.

    Returns:
        ``True`` once the phase is Succeeded or Failed.
    """
    return status is not None and status.phase in FINISHED


def last_status_write(body: dict[str, Any], manager: str) -> datetime | None:
    """The API server's time of ``manager``'s last write to the status subresource.

    Args:
        body: the LeasedJob as read (with ``metadata.managedFields``).
        manager: the field manager, e.g. ``leasehold-operator``.

    Returns:
        The time, or ``None`` when no such entry (or time) is there.
    """
    latest: datetime | None = None
    for entry in (body.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") != manager or entry.get("subresource") != "status":
            continue
        raw = entry.get("time")
        if not raw:
            continue
        when = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
        latest = when if latest is None or when > latest else latest
    return latest


class FinishClocks:
    """Seconds since each finished job finished, and how long until its TTL.

    Args:
        monotonic: this process's monotonic clock (injected for tests).
    """

    def __init__(self, monotonic: MonotonicClock) -> None:
        self._clocks = JobClocks(monotonic)

    def seconds_left(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        planned: LeasedJobStatus,
        server_now: datetime | None,
        manager: str,
    ) -> float | None:
        """How long until the job is to be deleted (``<= 0``: now).

        Args:
            job: the job as read.
            body: its body as read (for ``managedFields``).
            planned: the status just planned for it.
            server_now: the API server's time of that read (``Date``), if known.
            manager: the operator's field manager.

        Returns:
            ``None`` when the job has no TTL or has not finished; else the
            seconds left (counted from the first sight of the finish in this
            process when the server's times are not known: late, never early).
        """
        ttl = job.spec.ttl_seconds_after_finished
        if ttl is None or not is_finished(planned):
            return None
        meta = job.metadata
        seen = last_status_write(body, manager) if is_finished(job.status) else None
        anchor = seen or server_now  # None only when server_now is too: counts from now
        elapsed = self._clocks.elapsed_seconds(
            f"{meta.get('namespace')}/{meta.get('name')}",
            str(meta.get("uid", "")),
            anchor or _EPOCH,  # unused: without server_now the age is 0
            server_now,
        )
        return ttl - elapsed

    def forget(self, key: str) -> None:
        """The job is gone: drop its anchor.

        Args:
            key: the job's ``namespace/name``.
        """
        self._clocks.forget(key)
