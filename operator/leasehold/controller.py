"""Kopf glue: watch LeasedJobs and JobLeases, judge expiry, trigger reconciles.

Why this module exists: it is the only module that imports Kopf. Handlers
are thin: a LeasedJob event queues a reconcile of that job; a JobLease event
feeds the operator's :class:`~leasehold.protocol.ExpiryClock` and queues a
reconcile when the holder, token or completion changed. All decisions live
in :mod:`leasehold.reconcile`; all API calls in :mod:`leasehold.service`.

Kopf never writes to a JobLease: only ``@kopf.on.event`` handlers are used
(no progress storage, no finalizers, no diff-base annotations), so a renewal
costs exactly one write — the worker's own.

Expiry (``DESIGN.md``): the operator notes on its own monotonic clock when it
first saw each spec generation of a lease, and reclaims when no change was
seen for the lease duration plus a margin. A restarted operator starts every
window afresh, so it never reclaims early.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import kopf

from leasehold import metrics, models
from leasehold.protocol import ExpiryClock
from leasehold.service import JobService
from leasehold.settings import OperatorSettings
from leasehold.store import StoreError, TransientStoreError

log = logging.getLogger(__name__)

PREFIX = "leasehold.dev"


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


@dataclass(order=True)
class _Due:
    at: float
    key: str = field(compare=False)
    generation: int = field(compare=False)


@dataclass(frozen=True)
class LeaseChange:
    """What one JobLease watch event changed.

    Attributes:
        before: ``(holder, token, completion, cap)`` seen last, ``None`` at first sight.
        after: the same now (``None`` when the lease was deleted).
        generation_changed: the spec changed since the last event.
    """

    before: tuple[Any, ...] | None
    after: tuple[Any, ...] | None
    generation_changed: bool

    @property
    def needs_reconcile(self) -> bool:
        """Holder, token, completion or cap changed (or first sight, or gone)."""
        return self.before != self.after


@dataclass
class _Watched:
    namespace: str
    name: str
    job_name: str
    generation: int
    duration_seconds: int
    held: bool
    signature: tuple[Any, ...]


class ExpiryWatch:
    """Schedules expiry checks of held leases and reclaims the expired ones.

    Args:
        clock: the operator's expiry judge.
        on_expired: coroutine run for an expired lease:
            ``on_expired(namespace, lease_name, job_name, generation)``.
        monotonic: the monotonic clock (the same one ``clock`` uses).
    """

    def __init__(
        self,
        clock: ExpiryClock,
        on_expired: Callable[[str, str, str, int], Awaitable[None]],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._on_expired = on_expired
        self._monotonic = monotonic
        self._heap: list[_Due] = []
        self._watched: dict[str, _Watched] = {}
        self._wake = asyncio.Event()

    def observe(self, body: dict[str, Any], deleted: bool = False) -> LeaseChange:
        """Note a JobLease watch event.

        Args:
            body: the JobLease body from the event.
            deleted: whether the event was a deletion.

        Returns:
            What changed since the last event of this lease.
        """
        meta = body.get("metadata", {})
        spec = body.get("spec", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}/{meta.get('uid')}"
        if deleted:
            self._clock.forget(key)
            gone = self._watched.pop(key, None)
            return LeaseChange(gone.signature if gone else None, None, False)
        generation = int(meta.get("generation", 0))
        signature = (
            spec.get("holderIdentity"),
            spec.get("fencingToken"),
            spec.get("completion"),
            spec.get("maxFencingToken"),
        )
        held = spec.get("holderIdentity") is not None and spec.get("completion") is None
        old = self._watched.get(key)
        self._watched[key] = _Watched(
            namespace=str(meta.get("namespace")),
            name=str(meta.get("name")),
            job_name=str(spec.get("jobName", meta.get("name"))),
            generation=generation,
            duration_seconds=int(spec.get("leaseDurationSeconds", 30)),
            held=held,
            signature=signature,
        )
        first_seen = self._clock.observe(key, str(generation))
        if held:
            due = first_seen + self._watched[key].duration_seconds + self._clock.margin_seconds
            earliest = not self._heap or due < self._heap[0].at
            heapq.heappush(self._heap, _Due(due, key, generation))
            if earliest:  # the loop sleeps until the earliest entry; wake it only if that moved
                self._wake.set()
        return LeaseChange(
            old.signature if old else None,
            signature,
            old is None or old.generation != generation,
        )

    async def run(self) -> None:
        """Check leases as they come due; runs until cancelled."""
        while True:
            self._wake.clear()
            if not self._heap:
                await self._wake.wait()
                continue
            due = self._heap[0]
            delay = due.at - self._monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                continue
            heapq.heappop(self._heap)
            watched = self._watched.get(due.key)
            if watched is None or not watched.held or watched.generation != due.generation:
                continue  # renewed, released, completed or deleted since
            remaining = self._clock.remaining_seconds(
                due.key, str(due.generation), watched.duration_seconds
            )
            if remaining > 0:
                heapq.heappush(
                    self._heap, _Due(self._monotonic() + remaining, due.key, due.generation)
                )
                continue
            metrics.EXPIRATIONS.inc()
            try:
                await self._on_expired(
                    watched.namespace, watched.name, watched.job_name, due.generation
                )
            except Exception:
                log.exception("reclaim of %s failed; will retry", due.key)
                heapq.heappush(self._heap, _Due(self._monotonic() + 1.0, due.key, due.generation))


@dataclass
class Runtime:
    """What the handlers share, passed to Kopf as ``memo``.

    Attributes:
        settings: the operator's settings.
        service: the service layer (blocking API calls).
        queue: the reconcile work queue.
        expiry: the expiry watch.
    """

    settings: OperatorSettings
    service: JobService
    queue: WorkQueue
    expiry: ExpiryWatch
    phases: metrics.JobPhases = field(default_factory=metrics.JobPhases)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def build_runtime(settings: OperatorSettings, service: JobService) -> Runtime:
    """Wire the service, queue and expiry watch together.

    Args:
        settings: the operator's settings.
        service: the service layer.

    Returns:
        The runtime to pass to Kopf as ``memo``.
    """
    queue = WorkQueue(service.reconcile, settings.retry_delay_seconds)

    async def on_expired(namespace: str, lease_name: str, job_name: str, generation: int) -> None:
        outcome = await asyncio.to_thread(service.reclaim, namespace, lease_name, generation)
        if outcome.reclaimed:
            metrics.RECLAIMS.inc()
        log.debug("expiry of %s/%s: %s", namespace, lease_name, outcome.reason)
        queue.trigger(namespace, job_name)

    clock = ExpiryClock(settings.expiry_margin_seconds, time.monotonic)
    return Runtime(settings, service, queue, ExpiryWatch(clock, on_expired))


# --------------------------------------------------------------------------
# Handlers


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """Tune Kopf (the only place that does) and start the expiry watch."""
    runtime: Runtime = memo.runtime
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.peering.standalone = runtime.settings.standalone
    settings.peering.mandatory = not runtime.settings.standalone
    settings.peering.name = runtime.settings.peering_name
    settings.peering.priority = runtime.settings.priority
    runtime.tasks.append(asyncio.get_running_loop().create_task(runtime.expiry.run()))
    metrics.serve(runtime.settings.metrics_port)
    log.info(
        "leasehold operator started (expiry margin %.1fs, %s)",
        runtime.settings.expiry_margin_seconds,
        "namespaces " + ",".join(runtime.settings.namespaces)
        if runtime.settings.namespaces
        else "cluster-wide",
    )


@kopf.on.cleanup()
async def stop_tasks(memo: Any, **_: Any) -> None:
    """Stop the expiry watch."""
    for task in memo.runtime.tasks:
        task.cancel()


@kopf.on.event(models.GROUP, models.VERSION, "leasedjobs")
async def leased_job_event(*, type: str, body: kopf.Body, memo: Any, **_: Any) -> None:
    """A LeasedJob changed: reconcile it."""
    meta = body["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    phase = (body.get("status") or {}).get("phase")
    memo.runtime.phases.observe(key, phase, deleted=type == "DELETED")
    if type == "DELETED":
        return
    memo.runtime.queue.trigger(meta["namespace"], meta["name"])


@kopf.on.event(models.GROUP, models.VERSION, "jobleases")
async def job_lease_event(*, type: str, body: kopf.Body, memo: Any, **_: Any) -> None:
    """A JobLease changed: feed the expiry clock; reconcile its job on a real change."""
    runtime: Runtime = memo.runtime
    raw = dict(body)
    change = runtime.expiry.observe(raw, deleted=type == "DELETED")
    if change.after is None:
        metrics.lease_forgotten(change.before)
    else:
        metrics.observe_lease_change(
            change.before,
            change.after,
            change.generation_changed,
            raw.get("spec", {}).get("renewTime"),
        )
    if change.needs_reconcile:
        job_name = raw.get("spec", {}).get("jobName") or raw["metadata"]["name"]
        runtime.queue.trigger(raw["metadata"]["namespace"], job_name)
