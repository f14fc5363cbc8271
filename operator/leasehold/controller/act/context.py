"""What every actor shares: the lease store, the Kubernetes edge and the engines' state.

Why this module exists: the actors of single, indexed and scheduled jobs
write through the same edges and keep the same caches current; one plain
object carries them (as Kopf's ``memo`` does for handlers), so no actor
reaches into another's private methods.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from leasehold import names
from leasehold.controller.engines.caches import ObjectCache
from leasehold.controller.engines.expiry import ExpiryClock
from leasehold.controller.engines.locks import JobLocks
from leasehold.controller.engines.pods import PodMemory
from leasehold.controller.engines.writes import OwnWrites, StatusWriteClock
from leasehold.controller.kube.events import EventRecorder
from leasehold.controller.kube.objects import CustomObjects
from leasehold.controller.kube.pods import Pods
from leasehold.lease.protocol import MonotonicClock
from leasehold.lease.store import LeaseStore, StoredLease

COMPONENT = "leasehold-operator"
"""The operator's field manager and Events' ``source.component``."""


class DecidedWait(NamedTuple):
    """A decided job's wait for its pods, on the operator's monotonic clock (seconds)."""

    since: float
    """When this process first saw the job decided and not finished."""
    listed_at: float | None
    """When its pods were last listed (between lists the pod watch's memory counts them);
    ``None`` until a list answered."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def index_lease_group(body: Mapping[str, Any]) -> str | None:
    """The group of a JobLease in the lease cache: its job's name, if it is an index lease.

    An index lease carries the labels ``leasehold.dev/job`` (its job) and
    ``leasehold.dev/completion-index``: the same selector the indexed actor
    would LIST with (``names.LABEL_JOB=<job>,names.LABEL_COMPLETION_INDEX``),
    so the group holds exactly what that LIST would return.

    Args:
        body: a JobLease body.

    Returns:
        The job's name (the ``leasehold.dev/job`` label), or ``None`` for a
        job's own lease or a run's lease.
    """
    labels = (body.get("metadata") or {}).get("labels") or {}
    if names.LABEL_COMPLETION_INDEX not in labels:
        return None
    job = labels.get(names.LABEL_JOB)
    return str(job) if job is not None else None


def _lease_cache() -> ObjectCache:
    return ObjectCache(group_of=index_lease_group)


@dataclass
class Context:
    """The edges and the state the actors share (one per operator process).

    Attributes:
        store: the lease store (every lease write).
        pods: pods and namespaces.
        jobs: LeasedJobs (reads, status writes, deletes).
        events: the Event recorder.
        clock: wall clock for status stamps (for people; never judged).
        monotonic: this process's monotonic clock (deadlines, waits).
        job_cache: the newest LeasedJob bodies seen (Kopf's events, status writes).
        lease_cache: the newest JobLease bodies seen (the lease watch, own writes),
            index leases grouped by job (:func:`index_lease_group`).
        pod_memory: the last state seen of attempt pods (the pod watch).
        own_writes: versions written here (their watch events are skipped).
        locks: one lock per job.
        quota_held: ``(namespace, pod name)`` -> job name, of attempts whose
            pod a ResourceQuota refused and that has not been created since:
            their claim is kept while the pod create is retried, and the
            startup bound does not reclaim them (no pod, no worker: nothing
            ran). Dropped when the pod is created or the job is gone.
        lease_clock: when each lease version was first seen: the expiry
            judge's clock (the runtime sets the one its expiry watch uses).
        decided_seen: ``(namespace, job name, job UID)`` -> the
            :class:`DecidedWait` of a job this process saw decided and not
            finished: the bounded wait for its pods counts from its
            ``since``, never from a wall-clock stamp (a clock step must
            neither end it early nor stretch it). Dropped when the job
            finishes or is gone.
        status_clock: when each job's status was last written, and how long a
            change of counts alone may wait (:func:`.status.write_status_soon`).
    """

    store: LeaseStore
    pods: Pods
    jobs: CustomObjects
    events: EventRecorder
    clock: Callable[[], datetime] = _utcnow
    monotonic: MonotonicClock = time.monotonic
    job_cache: ObjectCache = field(default_factory=ObjectCache)
    lease_cache: ObjectCache = field(default_factory=_lease_cache)
    pod_memory: PodMemory = field(default_factory=PodMemory)
    own_writes: OwnWrites = field(default_factory=OwnWrites)
    locks: JobLocks = field(default_factory=JobLocks)
    quota_held: dict[tuple[str, str], str] = field(default_factory=dict)
    lease_clock: ExpiryClock = field(default_factory=lambda: ExpiryClock(1.0, time.monotonic))
    decided_seen: dict[tuple[str, str, str], DecidedWait] = field(default_factory=dict)
    status_clock: StatusWriteClock = field(default_factory=StatusWriteClock)

    def now(self) -> datetime:
        """The wall-clock time for status stamps (for people; never judged)."""
        return self.clock()

    def wrote_lease(self, lease: StoredLease) -> None:
        """Note a lease version this operator wrote: cached, and its watch event skipped.

        Args:
            lease: the lease as the write returned it.
        """
        self.own_writes.record("JobLease", lease.namespace, lease.name, lease.resource_version)
        self.lease_cache.put(lease.body)
